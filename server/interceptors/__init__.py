"""The server's interceptors: what every call goes through before and after its servicer.

``server.app`` chains them in the order a call meets them; each rebuilds a method's handler
around its behaviour (``handlers``), whatever the kind of call.
"""
