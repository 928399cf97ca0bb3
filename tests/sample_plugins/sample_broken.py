"""A test plugin that fails to import."""

raise ImportError("sample_broken needs a package that is not installed")
