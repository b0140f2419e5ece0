"""Clicks as a training and evaluation signal.

- :mod:`rerank.clicks.log`: the click log format (one impression a line) and its streaming reader;
- :mod:`rerank.clicks.models`: click models (position-based, cascade, DBN) over relevance grades;
- :mod:`rerank.clicks.simulator`: simulated logs of a ranking's result pages (``rerank clicks``).
"""
