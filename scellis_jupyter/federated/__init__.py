"""Federated learning (to come): a Pool configuration whose sites keep their data; strategies as catalog
content, a differential-privacy budget and secure aggregation. Stands on `pool`.
"""
