"""A client of the proxy tests written with Python's standard library only.

    client.py get URL [PROXY]          GET; print the answer as JSON
    client.py post URL FILE [PROXY]    POST FILE's bytes; print the answer as JSON
    client.py stream URL               GET; print every line as it arrives

The JSON holds status, headers, the body's SHA-256 and length, and the body
itself when it is short. HTTP errors (4xx, 5xx) are answers here, not
failures. PROXY is an http:// proxy URL for urllib's ProxyHandler.
"""
import hashlib
import json
import sys
import urllib.error
import urllib.request


def opener(proxy):
    # An explicit handler, so that the environment's proxies never apply.
    return urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy} if proxy else {}))


def answer(resp):
    h = hashlib.sha256()
    n = 0
    head = b""
    while True:
        chunk = resp.read(1 << 16)
        if not chunk:
            break
        h.update(chunk)
        n += len(chunk)
        if len(head) < 4096:
            head += chunk[: 4096 - len(head)]
    return {
        "status": resp.status,
        "headers": {k.lower(): v for k, v in resp.headers.items()},
        "sha256": h.hexdigest(),
        "length": n,
        "body": head.decode("utf-8", "replace") if n <= 4096 else "",
    }


def call(req, proxy):
    try:
        with opener(proxy).open(req, timeout=60) as resp:
            return answer(resp)
    except urllib.error.HTTPError as e:
        return answer(e)


def main(argv):
    cmd, url = argv[1], argv[2]
    if cmd == "get":
        print(json.dumps(call(urllib.request.Request(url), argv[3] if len(argv) > 3 else None)))
    elif cmd == "post":
        with open(argv[3], "rb") as f:
            data = f.read()
        req = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "application/octet-stream"})
        print(json.dumps(call(req, argv[4] if len(argv) > 4 else None)))
    elif cmd == "stream":
        with opener(None).open(url, timeout=60) as resp:
            while True:
                line = resp.readline()
                if not line:
                    break
                sys.stdout.write(line.decode())
                sys.stdout.flush()
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main(sys.argv)
