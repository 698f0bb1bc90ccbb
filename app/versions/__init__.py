"""The tabs about policy versions: Samples, Leaderboard (with its export panel) and Arena."""
