"""The one orchestration path: attempts, retries, hedges, keepalive, stuck, disconnect.

    flow.py     which attempt comes next (retries, fallbacks, retry budget)
    attempt.py  one upstream attempt: send, classify, timing, lease release
    stream.py   streaming exchanges: upstream pumps → bounded queue → client relay
    unary.py    non-streaming exchanges
"""
