"""A real nginx on 127.0.0.1 serving one directory read-only (GET/HEAD, Range, ETag), started and stopped by the
test, with its config, pid, logs and temp files in a temp dir (the Python twin of tests/common/http.rs's Nginx)."""
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

NGINX = next((p for p in (os.environ.get("NGINX"), "/usr/sbin/nginx", "/usr/bin/nginx") if p and os.path.isfile(p)),
             None)

CONFIG = """daemon off;
master_process on;
worker_processes 1;
{user}pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log {d}/access.log;
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  default_type application/octet-stream;
  types {{ application/json json; }}
  sendfile on;
  server {{
    listen 127.0.0.1:{port};
    root {root};
    location / {{ limit_except GET {{ deny all; }} autoindex on; }}
  }}
}}
"""


def require_nginx():
    """Skips where nginx is missing, unless FUSE_TESTS_REQUIRED=1 (scripts/test installs nginx) says it must run."""
    if NGINX is None:
        import pytest

        assert "FUSE_TESTS_REQUIRED" not in os.environ, "nginx is required (scripts/test installs it) but missing"
        pytest.skip("nginx not installed")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port):
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
        return True
    return False


@contextlib.contextmanager
def nginx(root, user=None):
    """Serves `root` with nginx; yields the base URL `http://127.0.0.1:PORT`. Workers run as `user` ("nobody
    nogroup", say), else as root when the test is, so they can read a FUSE mount made without allow_other."""
    require_nginx()
    errors = ""
    for _ in range(5):
        d = tempfile.mkdtemp(prefix="daf-mount-nginx-")
        port = free_port()
        user_line = f"user {user};\n" if user else "user root root;\n" if os.geteuid() == 0 else ""
        with open(os.path.join(d, "nginx.conf"), "w") as f:
            f.write(CONFIG.format(user=user_line, d=d, port=port, root=root))
        proc = subprocess.Popen([NGINX, "-p", d, "-e", os.path.join(d, "error.log"), "-c",
                                 os.path.join(d, "nginx.conf")], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 10
        while time.time() < deadline and proc.poll() is None and not _listening(port):
            time.sleep(0.02)
        if proc.poll() is None and _listening(port):
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                shutil.rmtree(d, ignore_errors=True)
            return
        proc.kill()
        proc.wait()
        errors = proc.stderr.read().decode(errors="replace")
        with contextlib.suppress(OSError), open(os.path.join(d, "error.log")) as f:
            errors += f.read()
        shutil.rmtree(d, ignore_errors=True)
    raise RuntimeError(f"nginx did not start: {errors}")


@contextlib.contextmanager
def serving(links):
    """nginx serving a temporary directory of symbolic links ({name: target}: read-only fixtures, served through
    the links, never copied or written); yields the base URL."""
    root = tempfile.mkdtemp(prefix="daf-mount-served-")
    try:
        for name, target in links.items():
            os.symlink(os.path.realpath(target), os.path.join(root, name))
        with nginx(root) as base:
            yield base
    finally:
        shutil.rmtree(root)
