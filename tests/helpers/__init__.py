"""Helpers more than one test file uses: reading other processes, shared run settings.

Test files import them as `from helpers.processes import ...` (pytest puts tests/ on the path,
as it does for conftest).
"""
