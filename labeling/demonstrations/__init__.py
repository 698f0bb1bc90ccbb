"""Demonstrations: written on the pair on screen, TRL's SFT formats in and out."""
