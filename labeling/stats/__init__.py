"""What people's judgements say of one another: agreement, reliability, overlapped labels."""
