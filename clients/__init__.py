"""Flower ClientApp side: a site's local training (plain or DP-SGD) and its local audit."""
