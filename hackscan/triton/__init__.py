"""Triton kernels: facts about ``@triton.jit`` functions and their launches (``ctx.triton``)."""
