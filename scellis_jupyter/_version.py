"""The engine version, apart from the package root so that any stage can read it without importing it all."""
__version__ = "0.1.0"
