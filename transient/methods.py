"""The analysis methods' names (a module of its own, so a command line can offer them without importing
the analysis)."""

METHODS = ("ccplab", "tpcca")
"""Analysis methods: the corrected default and TPCCA's exact reference analysis."""
