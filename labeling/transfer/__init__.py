"""Prompts and preference data sets in, labels and prompts out, and their formats."""
