def custom_kernel(data)
    return data
