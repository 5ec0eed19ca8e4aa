"""Training methods, one subpackage each (``sat_seq``, ...), laid out like their seed recipes."""
