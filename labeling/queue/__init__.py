"""What people are asked to judge and how it is recorded: selection, the queue, gold's turn, rankings."""
