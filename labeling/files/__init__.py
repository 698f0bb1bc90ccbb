"""Bytes and text that come in: bounded lines, columnar rows in a capped child, text fields."""
