"""What the Python tests of the control API share: one JSON request (a body, or JSON lines),
and LSNs as PostgreSQL writes them."""

import json
import urllib.error
import urllib.request


class Control:
    """The control API at `url`: `control(method, path, body=None, lines=None)` is the
    answer's status and JSON (an error status too, with its `{"error": ...}`)."""

    def __init__(self, url):
        self.url = url.rstrip("/")

    def __call__(self, method, path, body=None, lines=None):
        data = None
        if body is not None:
            data = json.dumps(body).encode()
        elif lines is not None:
            data = "".join(json.dumps(line) + "\n" for line in lines).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")


def lsn_text(lsn):
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def lsn_value(text):
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)
