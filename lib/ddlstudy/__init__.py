"""ddlstudy: Parameter Server vs all-reduce data-parallel training, measured."""

__version__ = "0.1.0"
