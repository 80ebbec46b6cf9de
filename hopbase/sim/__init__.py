"""The simulated provider: ``provider: simulated`` in-process, and ``hopbase sim`` over HTTP.

    generator.py   SimulatedAnswer: canonical events on a timing schedule, scripted failures
    inprocess.py   simulated_request → SimulatedResponse, read like an upstream HTTP answer
    server.py      make_sim_app / run_sim: the same answers over OpenAI and Anthropic HTTP
"""
