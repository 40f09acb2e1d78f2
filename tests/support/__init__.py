"""Helpers shared by test tiers: a real redis-server for adapter and acceptance tests."""
