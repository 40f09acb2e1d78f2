"""redisq: Redis storage for varmq."""
