"""dwtune: how deep, how wide? Depth-to-width studies of Transformer LMs at fixed budgets."""

__version__ = "0.1.0"
