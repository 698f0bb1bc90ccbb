"""Limits of the served studio, shared by the command line's defaults and the server. Imports nothing, so the
command line stays light."""

MAX_UPLOAD_MB = 200  # largest file one upload may carry (prompt or preference import); a bigger one is refused
# before it is stored: gradio_client raises, the browser shows an error, a raw POST gets HTTP 413
LOGIN_BACKOFF_MAX_S = 120  # longest lock-out after repeated failed logins for a name or from an address (--auth)
IDLE_TIMEOUT_MIN = 480  # a login session unused this long ends; the browser shows the login page again (--auth)
