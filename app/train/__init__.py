"""The Train tab: its form, checks and words, rewards, the SFT and root actions, the job view."""
