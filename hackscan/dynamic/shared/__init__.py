"""Modules both sides of the dynamic stage use: the wire format, the probe catalogue, the harness
profiles and the extension build cache's paths.  None imports torch or numpy when it is imported
(they do so inside the functions only the worker side, or only the parent, calls)."""
