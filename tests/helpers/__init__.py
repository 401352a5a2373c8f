"""Helpers the test modules share: spec builders, generated data, processes, drivers.

Test modules import from here (``from tests.helpers.specs import small_simulated``), never from
each other or from a conftest; fixtures live in the conftest.py files.
"""
