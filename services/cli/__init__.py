"""The longrun command line (being built)."""
