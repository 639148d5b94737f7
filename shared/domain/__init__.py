"""The pure WorkItem domain: records, derived views and tool contracts.

Nothing in this package performs I/O or reads the clock; time arrives as an argument.
"""
