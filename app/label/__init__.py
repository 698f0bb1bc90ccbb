"""The Label tab: pairs, rankings, the richer verdict, demonstrations written on screen, a judge's suggestion."""
