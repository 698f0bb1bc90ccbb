"""How the studio is served: the one gr.Blocks of the tabs, the server, sessions, throttling, limits."""
