"""Who may call the API: the policy table, the authenticator and the interceptor."""
