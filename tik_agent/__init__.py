"""tik-agent: search for faster Triton kernels that keep a seed kernel's bits."""

__version__ = "0.1.0"
