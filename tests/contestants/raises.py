def custom_kernel(data):
    raise RuntimeError("kernel blew up on purpose")
