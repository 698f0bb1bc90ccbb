"""What people say of the policy versions: win-rate pairs and their statistics, the arena."""
