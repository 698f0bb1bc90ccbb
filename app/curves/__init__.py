"""The Curves tab: a job's charts, live while it runs."""
