import sys


def custom_kernel(data):
    print(f"debug: custom_kernel got a batch of shape {tuple(data.shape)}")
    print("debug: and a line on stderr", file=sys.stderr)
    raise ValueError("kernel gave up after printing")
