"""Counter-based randomness: Philox-4x32-10 keyed by (seed, named sub-stream), countered by element index."""
from .philox import philox4x32, stream_key, stream_bits, bits_to_uniform
from .generator import Generator, Stream, STREAMS

__all__ = ["philox4x32", "stream_key", "stream_bits", "bits_to_uniform", "Generator", "Stream", "STREAMS"]
