"""Report: the papermill runner and the Sphinx book."""
