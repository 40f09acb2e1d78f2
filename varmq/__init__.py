"""varmq: a job-queue worker framework."""
