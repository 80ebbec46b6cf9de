"""Where routing state lives beyond one process (SPEC section 11).

``state.backend: memory`` (the default) needs nothing here: the router's own
state is the whole truth. ``state.backend: redis`` adds `RedisState`, which
shares cooldowns, failure windows, in-flight counts, rpm/tpm windows and speed
estimates between replicas through Redis without putting Redis on the request
path; the response cache then uses `hopbase.cache.RedisStore` on the same client.
"""

from hopbase.state.redis import RedisState, new_replica_id

__all__ = ["RedisState", "new_replica_id"]
