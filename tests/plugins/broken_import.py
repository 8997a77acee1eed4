"""A throw-away plugin that fails to import."""

raise ImportError("deliberately broken: missing dependency 'nonexistent_gpu_lib'")
