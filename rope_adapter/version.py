"""The package version (one place: the package, the exported code headers and the cards read it)."""

__version__ = "0.1.0"
