"""``hydria build`` as the unprivileged test user: Dockerfiles built FROM the Debian test image in
the local registry, started, compared with ``podman build`` of the same Dockerfile, rebuilt from
the cache, and broken in the ways users break them."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from hydria.runtime.rootfs import image_layers
from testbed.publish import PublishedImage
from testbed.tlsproxy import BODY, TlsInspectingProxy
from testbed.tree import image_listing, snapshot
from testbed.users import live_processes
from testbed.workspace import Workspace

pytestmark = pytest.mark.integration


def base_of(image: PublishedImage) -> str:
    """The image as a Dockerfile's FROM names it."""
    return f"{image.registry}/{image.repository}:{image.tag}"


def make_context(workspace: Workspace, files: dict[str, str | bytes], name: str = "context") -> Path:
    context = workspace.out / name
    for relative, content in files.items():
        path = context / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    for path in [context, *context.rglob("*")]:
        os.chown(path, workspace.user.uid, workspace.user.gid)
    return context


def build(workspace: Workspace, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return workspace.run("build", *args, timeout=600, **env)


def built(workspace: Workspace, *args: str, **env: str) -> str:
    result = build(workspace, *args, **env)
    assert result.returncode == 0, result.stderr
    return result.stderr


def oci_config(layout: Path) -> dict[str, object]:
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((layout / "blobs" / "sha256" / index["manifests"][0]["digest"][7:]).read_text())
    config: dict[str, object] = json.loads((layout / "blobs" / "sha256" / manifest["config"]["digest"][7:]).read_text())
    return config


def tar_of(members: dict[str, tuple[str, int]]) -> bytes:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        for name, (content, owner) in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.uid, info.gid = len(content), owner, owner
            tar.addfile(info, io.BytesIO(content.encode()))
    return data.getvalue()


def test_a_dockerfile_of_every_instruction_builds_and_starts(debian: PublishedImage, workspace: Workspace) -> None:
    context = make_context(workspace, {
        "Dockerfile": f"""# escape=\\
ARG BASE={base_of(debian)}
FROM ${{BASE}} AS builder
ARG SALUTE=hello
ENV APP=/app WHO="the builder"
WORKDIR $APP
COPY src/ ./src/
RUN echo "$SALUTE from $WHO" > made.txt && rm /etc/motd && mkdir -p /var/cache/x && \\
    touch /var/cache/x/file
RUN <<EOF
set -e
echo heredoc > /app/heredoc.txt
EOF
RUN <<EOF
#!/usr/bin/python3
open("/app/python.txt", "w").write("python heredoc\\n")
EOF
ONBUILD RUN echo triggered > /onbuild.txt

FROM builder AS child
RUN test -f /onbuild.txt

FROM {base_of(debian)}
COPY --from=builder /app /srv/app
COPY --chown=1234:55 --chmod=640 src/a.txt /opt/owned.txt
ADD data.tar.gz /opt/data/
USER 1000
LABEL org.example.title="built by hydria" version=1
EXPOSE 8080 53/udp
VOLUME ["/cache"]
STOPSIGNAL SIGINT
HEALTHCHECK --interval=30s --retries=3 CMD test -f /srv/app/made.txt
ENTRYPOINT []
CMD ["cat", "/srv/app/made.txt"]
""",
        "src/a.txt": "a\n",
        "src/secret.key": "never copied\n",
        "src/nested/b.txt": "b\n",
        ".dockerignore": "**/*.key\n",
        "data.tar.gz": tar_of({"inside.txt": ("packed\n", 7)}),
    })
    log = built(workspace, "-t", "app:1", "--oci", "layout", str(context))
    image = workspace.out / "app+1.sqsh"
    started = workspace.run("start", str(image))
    assert started.stdout == "hello from the builder\n", started.stderr
    out = workspace.run("start", str(image), "sh", "-c",
                        "cat /srv/app/heredoc.txt /srv/app/python.txt /srv/app/src/a.txt /srv/app/src/nested/b.txt "
                        "/opt/data/inside.txt; test -e /.hydria-build-script || echo no-script;"
                        "test -e /srv/app/src/secret.key || echo no-secret; test -e /onbuild.txt || echo no-trigger")
    assert out.stdout.splitlines() == ["heredoc", "python heredoc", "a", "b", "packed", "no-script", "no-secret",
                                       "no-trigger"], out.stderr
    assert image.read_bytes().startswith(b"hydria layered image 1\n"), "-t writes a layered image by default"
    listing = image_listing(image_layers(str(image)), "-lln")
    assert "-rw-r----- 1234/55" in next(line for line in listing.splitlines() if line.endswith("/opt/owned.txt"))
    assert "7/7" in next(line for line in listing.splitlines() if line.endswith("/opt/data/inside.txt"))
    assert "/proc/" not in listing.replace("squashfs-root/proc\n", "")  # no mount point leaked into a layer
    config = oci_config(workspace.out / "layout")
    inner = config["config"]
    assert isinstance(inner, dict)
    assert inner["Cmd"] == ["cat", "/srv/app/made.txt"] and not inner.get("Entrypoint")
    assert inner["User"] == "1000" and inner["StopSignal"] == "SIGINT"
    assert inner["Labels"]["org.example.title"] == "built by hydria" and inner["Labels"]["version"] == "1"
    assert set(inner["ExposedPorts"]) == {"8080/tcp", "53/udp"} and set(inner["Volumes"]) == {"/cache", "/data"}  # the base image has /data
    assert inner["Healthcheck"] == {"Test": ["CMD-SHELL", "test -f /srv/app/made.txt"], "Interval": 30 * 10**9,
                                    "Retries": 3}
    assert not any(e.startswith("SALUTE=") for e in inner["Env"])  # an ARG is no ENV
    # the builder stage's layers are not in the final image: the base's three, then COPY, COPY, ADD
    assert len(config["rootfs"]["diff_ids"]) == 3 + 3  # type: ignore[index]
    # the unused stage "child" was not built
    assert "RUN test -f /onbuild.txt" not in log


def test_the_middle_stage_builds_with_target_and_runs_onbuild_triggers(debian: PublishedImage,
                                                                      workspace: Workspace) -> None:
    context = make_context(workspace, {"Dockerfile": f"""FROM {base_of(debian)} AS parent
ONBUILD RUN echo triggered > /onbuild.txt
FROM parent AS child
RUN cat /onbuild.txt
FROM child
RUN false
"""})
    log = built(workspace, "--target", "child", "-o", "child.sqsh", str(context))
    assert "triggered" in log
    assert workspace.run("start", str(workspace.out / "child.sqsh"), "cat", "/onbuild.txt").stdout == "triggered\n"


def test_an_unchanged_rebuild_runs_nothing_and_a_changed_copy_reruns_only_what_follows(
        debian: PublishedImage, workspace: Workspace) -> None:
    context = make_context(workspace, {
        "Dockerfile": f"""FROM {base_of(debian)}
RUN echo one > /one.txt
COPY config.txt /etc/app.conf
RUN cat /etc/app.conf > /copied.txt
""",
        "config.txt": "first\n"})
    first = built(workspace, "-o", "app.sqsh", str(context))
    assert first.count(" DONE ") == 3 and "CACHED" not in first
    again = built(workspace, "--oci", "again", str(context))
    assert again.count("CACHED") == 3 and " DONE " not in again
    (context / "config.txt").write_text("second\n")
    changed = built(workspace, "-o", "app.sqsh", str(context))
    assert changed.count("CACHED") == 1 and changed.count(" DONE ") == 2
    assert workspace.run("start", str(workspace.out / "app.sqsh"), "cat", "/copied.txt").stdout == "second\n"
    fresh = built(workspace, "--no-cache", "-o", "app.sqsh", str(context))
    assert "CACHED" not in fresh


def test_a_failed_run_names_the_step_keeps_the_cache_before_it_and_writes_nothing(
        debian: PublishedImage, workspace: Workspace) -> None:
    dockerfile = f"""FROM {base_of(debian)}
RUN echo kept > /kept.txt
RUN echo about to fail; exit 3
"""
    context = make_context(workspace, {"Dockerfile": dockerfile})
    result = build(workspace, "-t", "broken", str(context))
    assert result.returncode != 0
    assert f"{context}/Dockerfile:3: RUN echo about to fail; exit 3: exited with status 3" in result.stderr
    assert "about to fail" in result.stderr + result.stdout
    assert "Traceback" not in result.stderr
    assert not (workspace.out / "broken.sqsh").exists()
    assert not list((workspace.cache / "build" / "work").glob("step.*"))
    (context / "Dockerfile").write_text(dockerfile.replace("exit 3", "true"))
    fixed = built(workspace, "-t", "broken", str(context))
    assert fixed.count("CACHED") == 1


@pytest.mark.parametrize(("dockerfile", "files", "message"), [
    ("FROM {base}\nFROOM x\n", {}, "Dockerfile:2: unknown instruction: FROOM"),
    ("FROM {base}\nCOPY --own=1 a /a\n", {}, "Dockerfile:2: COPY: unknown flag: --own"),
    ("RUN true\n", {}, "Dockerfile:1: RUN: comes before the first FROM"),
    ("FROM {base}\nCOPY missing.txt /m\n", {}, "missing.txt: no such file or directory in the build context"),
    ("FROM {base}\nCOPY secret.key /k\n", {"secret.key": "x", ".dockerignore": "*.key\n"},
     "secret.key: not in the build context: excluded by the .dockerignore rule '*.key'"),
    ("FROM {base}\nENV A=\"${{B:?must be set}}\"\n", {}, "B: must be set"),
    ("FROM {base}\nCOPY --chown=nobody-here a /a\n", {"a": "x"}, "--chown=nobody-here: the image has no user 'nobody-here'"),
    ("FROM {base}\nUSER nobody-here\nRUN true\n", {}, "USER nobody-here: the image has no user 'nobody-here'"),
    ("FROM {base}\nRUN --mount=type=ssh true\n", {}, "--mount type=ssh is not supported"),
    ("FROM {base}\nRUN --mount=type=secret,id=x,env=1X true\n", {}, "env=1X is not a variable's name"),
    ("FROM {base}\nRUN --mount=type=cache,taget=/c true\n", {}, "--mount=type=cache,taget=/c: type=cache takes no taget="),
    ("FROM {base}\nRUN --mount=type=cache,target=/c,sharing=exclusive true\n", {}, "sharing=exclusive"),
    ("FROM {base}\nRUN --mount=type=cache,target=/c,uid=1000 true\n", {}, "uid=1000: with one user ID mapped"),
    ("FROM {base}\nRUN --mount=type=cache,target=/c,mode=rwx true\n", {}, "mode=rwx is not octal"),
    ("FROM {base}\nRUN --mount=type=tmpfs,target=/t,size=lots true\n", {}, "size=lots is not a size"),
    ("FROM {base}\nRUN --mount=type=bind,target=/b,rw true\n", {}, "writable bind mounts are not supported"),
    ("FROM {base}\nRUN --mount=type=bind,target=/b,ro=maybe true\n", {}, "readonly=maybe is not true or false"),
])
def test_a_broken_dockerfile_gets_a_clear_error(debian: PublishedImage, workspace: Workspace, dockerfile: str,
                                                files: dict[str, str], message: str) -> None:
    context = make_context(workspace, {"Dockerfile": dockerfile.format(base=base_of(debian)), **files})
    result = build(workspace, "-o", "x.sqsh", str(context))
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (workspace.out / "x.sqsh").exists()


def test_build_says_where_the_image_goes_and_what_is_missing(workspace: Workspace) -> None:
    context = make_context(workspace, {"x": ""})
    result = build(workspace, str(context))
    assert result.returncode == 1 and "say where the image goes: -t NAME, -o IMAGE.sqsh, --oci DIR or --push URI" in result.stderr
    result = build(workspace, "-o", "x.sqsh", str(context))
    assert result.returncode == 1 and "No such file or directory" in result.stderr and "Dockerfile" in result.stderr


def test_run_installs_debian_packages_from_the_mirror(debian: PublishedImage, workspace: Workspace) -> None:
    context = make_context(workspace, {"Dockerfile": f"""FROM {base_of(debian)}
RUN --mount=type=cache,target=/var/cache/apt apt-get update -q && \\
    apt-get install -y -q --no-install-recommends hello && rm -rf /var/lib/apt/lists/*
"""})
    built(workspace, "-o", "hello.sqsh", str(context))
    assert workspace.run("start", str(workspace.out / "hello.sqsh"), "hello").stdout == "Hello, world!\n"
    listing = subprocess.run(["unsquashfs", "-l", str(workspace.out / "hello.sqsh")], capture_output=True, text=True,
                             check=True).stdout
    assert "squashfs-root/var/cache/apt/archives/hello" not in listing  # the cache mount stayed out of the image
    assert "zz-hydria-build" not in listing


def test_run_installs_python_packages_from_pypi(debian: PublishedImage, workspace: Workspace) -> None:
    """pip in a step reaches PyPI as the host does: here through a TLS proxy whose CA only the
    host trusts, which the step gets as a site's users give it, a bind mount of the host's bundle."""
    context = make_context(workspace, {"Dockerfile": f"""FROM {base_of(debian)}
RUN --mount=type=cache,target=/var/cache/apt apt-get update -q && \\
    apt-get install -y -q --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,source=host-ca.crt,target=/etc/ssl/certs/ca-certificates.crt \\
    --mount=type=cache,target=/root/.cache/pip \\
    pip install -q --break-system-packages --disable-pip-version-check six==1.16.0
""", "host-ca.crt": Path("/etc/ssl/certs/ca-certificates.crt").read_bytes()})
    built(workspace, "-o", "six.sqsh", str(context))
    started = workspace.run("start", str(workspace.out / "six.sqsh"), "python3", "-c",
                            "import six; print(six.__version__)")
    assert started.stdout == "1.16.0\n", started.stderr


TRAIN = """\
import torch

torch.manual_seed(0)
x = torch.linspace(-1, 1, 64).unsqueeze(1)
y = 3 * x + 0.5
model = torch.nn.Linear(1, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
for _ in range(200):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
print(f"torch {torch.__version__}: weight {model.weight.item():.2f} bias {model.bias.item():.2f}")
"""


def test_a_pytorch_cpu_training_image_builds_and_trains(debian: PublishedImage, workspace: Workspace,
                                                        tmp_path: Path) -> None:
    """PyTorch's CPU wheel (as the host's pip gets it: a wheel the site keeps, else PyPI) bound
    into the step, its dependencies from PyPI, a training script as the image's command."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64", "-d", str(wheels),
                    "torch==2.13.0"], check=True)
    files: dict[str, str | bytes] = {f"wheels/{wheel.name}": wheel.read_bytes() for wheel in wheels.iterdir()}
    context = make_context(workspace, {"Dockerfile": f"""FROM {base_of(debian)}
RUN --mount=type=cache,target=/var/cache/apt apt-get update -q && \\
    apt-get install -y -q --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,source=wheels,target=/wheels \\
    --mount=type=bind,source=host-ca.crt,target=/etc/ssl/certs/ca-certificates.crt \\
    --mount=type=cache,target=/root/.cache/pip \\
    pip install -q --break-system-packages --disable-pip-version-check --find-links /wheels torch==2.13.0
COPY train.py /opt/train.py
CMD ["python3", "/opt/train.py"]
""", "train.py": TRAIN, "host-ca.crt": Path("/etc/ssl/certs/ca-certificates.crt").read_bytes(), **files})
    built(workspace, "-o", "trainer.sqsh", str(context))
    trained = workspace.run("start", str(workspace.out / "trainer.sqsh"), timeout=300)
    assert trained.stdout.startswith("torch 2.13.0") and trained.stdout.endswith("weight 3.00 bias 0.50\n"), \
        trained.stdout + trained.stderr


def test_a_dockerfile_that_changes_no_file_writes_every_output(debian: PublishedImage, workspace: Workspace) -> None:
    """The base image's layers are fetched for the outputs even where no step needed its files."""
    context = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\nENV GREETING=hello\nLABEL a=b\n"})
    built(workspace, "--oci", "layout", "-o", "greeting.sqsh", str(context))
    config = oci_config(workspace.out / "layout")
    assert "GREETING=hello" in config["config"]["Env"] and config["config"]["Labels"]["a"] == "b"  # type: ignore[index]
    started = workspace.run("start", str(workspace.out / "greeting.sqsh"), "sh", "-c", "echo $GREETING")
    assert started.stdout == "hello\n", started.stderr


def test_more_steps_than_the_overlay_stacks_are_refused_before_any_runs(workspace: Workspace) -> None:
    """The kernel's overlay stacks 500 lower folders: a stage of 600 steps (200 of them in the stage
    it stands on) would fail at step 501 after running 500; it is refused at once, naming the limit."""
    lines = ["FROM scratch AS first", *["WORKDIR /a"] * 200, "FROM first", *["RUN touch /ran"] * 400]
    context = make_context(workspace, {"Dockerfile": "\n".join(lines) + "\n"})
    started = time.monotonic()
    result = build(workspace, "-o", "tall.sqsh", str(context))
    assert result.returncode == 1, result.stderr
    assert "stage 1 has 600 steps that make layers (ADD, COPY, RUN, WORKDIR), with the stages it stands on: more " \
           "than the 500 that the kernel's overlay stacks" in result.stderr, result.stderr
    assert "join RUN steps with &&" in result.stderr and "[first 1/200]" not in result.stderr
    assert time.monotonic() - started < 60 and not (workspace.out / "tall.sqsh").exists()


def test_run_mount_options_are_honoured(debian: PublishedImage, workspace: Workspace) -> None:
    context = make_context(workspace, {"Dockerfile": f"""FROM {base_of(debian)}
RUN --mount=type=tmpfs,target=/t,size=1m df -k /t | tail -1
RUN --mount=type=cache,target=/c,mode=0700 stat -c mode=%a /c
RUN --mount=type=cache,target=/c,ro touch /c/x 2>&1 || echo refused
"""})
    result = build(workspace, "--oci", "layout", str(context))
    output = result.stdout + result.stderr
    assert " 1024 " in output and "mode=700" in output and "Read-only file system" in output and "refused" in output


FETCH = ("RUN python3 -c \"import urllib.request; "
         "print(urllib.request.urlopen('https://pypi.example.invalid/simple/').read().decode())\" > /fetched")


def test_a_site_behind_a_tls_inspecting_proxy_builds_an_unchanged_dockerfile(debian: PublishedImage,
                                                                            workspace: Workspace) -> None:
    """The caller's proxy variables reach every RUN (as podman's), and HYDRIA_BUILD_CA_BUNDLE the
    site's certificate authority, by the variables programs read; neither enters the image."""
    context = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\n{FETCH}\n"})
    with TlsInspectingProxy(workspace.out) as proxy:
        proxied = {"HTTPS_PROXY": f"http://{proxy.address}"}
        refused = build(workspace, "-o", "refused.sqsh", str(context), **proxied)
        assert refused.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr, refused.stderr
        assert not (workspace.out / "refused.sqsh").exists()
        trusted = build(workspace, "-o", "image.sqsh", "--oci", "layout", str(context),
                        HYDRIA_BUILD_CA_BUNDLE=str(proxy.ca), **proxied)
        assert trusted.returncode == 0, trusted.stderr
    shown = workspace.run("start", str(workspace.out / "image.sqsh"), "sh", "-c", "cat /fetched; ls /run")
    assert shown.stdout.startswith(BODY.decode()) and "hydria-build" not in shown.stdout, shown.stderr
    config = oci_config(workspace.out / "layout")["config"]
    assert isinstance(config, dict)
    assert not [line for line in config["Env"] if line.split("=")[0] in ("SSL_CERT_FILE", "PIP_CERT", "HTTPS_PROXY")]
    unreadable = build(workspace, "-o", "never.sqsh", str(context), HYDRIA_BUILD_CA_BUNDLE="/nonexistent/ca.pem")
    assert unreadable.returncode != 0 and "HYDRIA_BUILD_CA_BUNDLE /nonexistent/ca.pem is not a file" in unreadable.stderr


def test_secrets_reach_only_the_steps_that_mount_them(debian: PublishedImage, workspace: Workspace) -> None:
    context = make_context(workspace, {"token": "s3cret\n", "Dockerfile": f"""FROM {base_of(debian)}
RUN --mount=type=secret,id=token stat -c %a /run/secrets/token > /mode && sha256sum < /run/secrets/token > /seen
RUN --mount=type=secret,id=netrc,target=/root/.netrc,mode=0440 stat -c %a /root/.netrc > /netrc-mode
RUN --mount=type=secret,id=absent test ! -e /run/secrets/absent
RUN --mount=type=secret,id=netrc,env=NETRC echo "$NETRC" | sha256sum > /from-variable; test -e /run/secrets/netrc && echo file-too >> /from-variable; true
RUN --mount=type=secret,id=netrc,env=TOKEN,target=/t test "$TOKEN" = "$(cat /t)" && echo both > /both
RUN echo "${{NETRC:-unset}} ${{TOKEN:-unset}}" > /after; ls -a /run/secrets /root > /listed 2>&1; true
"""})
    token = context / "token"
    secret = ["--secret", f"id=token,src={token}", "--secret", "id=netrc,env=NETRC_TEXT"]
    first = build(workspace, "-o", "image.sqsh", *secret, str(context), NETRC_TEXT="machine x")
    assert first.returncode == 0, first.stderr
    assert "the secret absent was not given" in first.stderr
    image = str(workspace.out / "image.sqsh")
    shown = workspace.run("start", image, "sh", "-c", "cat /mode /netrc-mode /seen /both /after /listed").stdout
    assert shown.startswith("400\n440\n"), shown
    assert hashlib.sha256(b"s3cret\n").hexdigest() in shown
    assert "both\nunset unset\n" in shown, shown  # env= gives the step the value, and that step alone
    from_variable = workspace.run("start", image, "cat", "/from-variable").stdout
    assert from_variable == f"{hashlib.sha256(b'machine x' + bytes([10])).hexdigest()}  -\n", from_variable
    assert ".netrc" not in shown and "token" not in shown, "no secret left in the image"
    assert b"s3cret" not in (workspace.out / "image.sqsh").read_bytes()
    token.write_text("changed\n")  # a secret's content is not in the cache key (as BuildKit's)
    again = build(workspace, "-o", "again.sqsh", *secret, str(context), NETRC_TEXT="machine x")
    assert again.returncode == 0 and "CACHED" in again.stderr, again.stderr

    required = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\n"
                                        "RUN --mount=type=secret,id=key,required=true true\n"}, name="required")
    missing = build(workspace, "-o", "never.sqsh", str(required))
    assert missing.returncode != 0 and "the secret key was not given" in missing.stderr, missing.stderr
    assert "--secret id=key,src=FILE" in missing.stderr
    for wrong, said in ((["--secret", "id=x"], "not a secret hydria build takes"),
                        (["--secret", "id=x,src=/nonexistent"], "/nonexistent is not a file you can read"),
                        (["--secret", "id=x,env=HYDRIA_UNSET_VARIABLE"], "HYDRIA_UNSET_VARIABLE is not set")):
        refused = build(workspace, "-o", "never.sqsh", *wrong, str(required))
        assert refused.returncode != 0 and said in refused.stderr, refused.stderr
    assert not (workspace.out / "never.sqsh").exists()


def test_a_volume_reaches_every_step_and_not_the_image(debian: PublishedImage, workspace: Workspace) -> None:
    wheels = workspace.out / "wheels"
    wheels.mkdir()
    (wheels / "numpy.whl").write_text("a wheel")
    os.chown(wheels, workspace.user.uid, workspace.user.gid)
    context = make_context(workspace, {"Dockerfile": f"""FROM {base_of(debian)}
RUN ls /wheels > /listed
RUN touch /wheels/written 2>/dev/null && echo written > /outcome || echo refused > /outcome
"""})
    result = build(workspace, "-o", "image.sqsh", "-v", f"{wheels}:/wheels:ro", str(context))
    assert result.returncode == 0, result.stderr
    shown = workspace.run("start", str(workspace.out / "image.sqsh"), "sh", "-c", "cat /listed /outcome; ls /")
    assert shown.stdout.startswith("numpy.whl\nrefused\n") and "wheels" not in shown.stdout.split("\n", 2)[2], shown
    bad = build(workspace, "-o", "never.sqsh", "-v", "/nonexistent:/x", str(context))
    assert bad.returncode != 0 and "--volume /nonexistent:/x: /nonexistent does not exist" in bad.stderr


@pytest.mark.parametrize(("sharing", "seen"), [("shared", "seen:held"), ("locked", "seen:"), ("private", "seen:")])
def test_a_cache_mount_is_shared_locked_or_private_as_it_says(debian: PublishedImage, workspace: Workspace,
                                                             sharing: str, seen: str) -> None:
    """A first build holds the cache folder for a while (a file there until it ends); a second,
    started meanwhile, sees that file (shared), waits for the first to end (locked) or gets an
    empty folder of its own at once (private)."""
    mount = f"--mount=type=cache,id=one,target=/c,sharing={sharing}"
    first = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\nRUN {mount} sh -c 'touch /c/held; "
                                                   "echo holding; sleep 4; rm /c/held'\n"}, "first")
    second = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\nRUN {mount} "
                                                    "sh -c 'echo seen:$(ls /c)'\n"}, "second")
    built(workspace, "--oci", "base-layout", str(make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\n"}, "base")))
    holder = workspace.popen("build", "--oci", "first-layout", str(first))
    assert holder.stdout is not None and holder.stderr is not None
    for line in holder.stdout:  # what a step prints goes to standard output
        if "holding" in line:
            break
    result = build(workspace, "--oci", "second-layout", str(second))
    output = result.stdout + result.stderr
    assert holder.wait(timeout=60) == 0, holder.stderr.read()
    assert seen in output.splitlines(), output
    assert ("Waiting for the cache folder of /c" in output) == (sharing == "locked")


@pytest.mark.parametrize(("signum", "when"), [(signal.SIGINT, "started\n"), (signal.SIGTERM, "started\n"),
                                             (signal.SIGKILL, "started\n"), (signal.SIGINT, "#2 [0 1/1] RUN ")])
def test_ctrl_c_or_kill_stops_the_running_step_and_leaves_nothing(debian: PublishedImage, workspace: Workspace,
                                                                  signum: int, when: str) -> None:
    """Stopped while the step runs (its output: "started"), or as it begins (its header line)."""
    context = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\nRUN echo started; sleep 60 & sleep 70\n"})
    process = subprocess.Popen([workspace.hydria, "build", "-o", "slow.sqsh", str(context)], user=workspace.user.uid,
                               group=workspace.user.gid, extra_groups=[], env=workspace.user.environment(workspace.env()),
                               cwd=workspace.out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(when):
            break
    # Ctrl-C (the terminal's whole group); a time limit (timeout, Slurm's: SIGTERM to hydria); kill -9 of hydria
    os.killpg(process.pid, signum) if signum == signal.SIGINT else process.send_signal(signum)
    assert process.wait(timeout=20) != 0
    assert not (workspace.out / "slow.sqsh").exists()
    deadline = time.monotonic() + 10
    while [p for p in live_processes(workspace.user, wait=0) if "sleep" in p] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in live_processes(workspace.user, wait=0) if "sleep" in p]  # nor what the step left running
    if signum == signal.SIGKILL:  # nothing could clean up: the next build does
        built(workspace, "--oci", "other", str(make_context(workspace, {"Dockerfile": "FROM scratch\n"}, "empty")))
    left = list((workspace.cache / "build" / "work").glob("step.*"))
    assert not left, (left, process.stdout.read())


EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def _podman(*args: str) -> str:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=True).stdout


def _export_tree(image: str, destination: Path) -> None:
    container = _podman("create", image, "true").strip()
    try:
        destination.mkdir()
        exported = subprocess.run(["podman", "export", container], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "--numeric-owner", "-C", str(destination)], input=exported, check=True)
    finally:
        _podman("rm", container)


def test_the_image_matches_podman_builds_of_the_same_dockerfile(debian: PublishedImage, workspace: Workspace,
                                                                tmp_path: Path) -> None:
    """With the test user's subordinate IDs mapped, owners come out as podman's (as root) too:
    a user made by useradd, chown, a setuid file, USER honoured by RUN."""
    context = make_context(workspace, {
        "Dockerfile": f"""FROM {base_of(debian)}
ENV APP=/app
WORKDIR /app
COPY src/ ./
COPY --chown=1234:55 --chmod=751 tool.sh /usr/local/bin/tool
RUN mkdir -p /var/made && echo made > /var/made/file && ln -s /var/made/file /app/link && \\
    rm -rf /usr/share/doc/python3 /etc/motd && chmod 700 /var/made
RUN useradd -u 1500 -m app && install -d -o app -g app -m 750 /var/app && touch /var/app/f && \\
    chown app:daemon /var/app/f && chmod u+s /usr/local/bin/tool
USER app
RUN touch "$HOME/made-as-app"
ADD files.tar.gz /opt/
CMD ["tool"]
""",
        "src/a.txt": "a\n", "src/sub/b.txt": "b\n", "tool.sh": "#!/bin/sh\necho tool\n",
        "files.tar.gz": tar_of({"x/y.txt": ("y\n", 0)}),
    })
    assert "subordinate IDs mapped" in built(workspace, "--oci", "layout", str(context))
    tag = f"localhost/hydria-build-compare-{os.getpid()}"
    subprocess.run(["podman", "build", "--isolation=chroot", "--network=host", "--tls-verify=false", "-q", "-t",
                    f"{tag}:podman", str(context)], capture_output=True, text=True, check=True)
    subprocess.run(["skopeo", "copy", "-q", f"oci:{workspace.out / 'layout'}:latest",
                    f"containers-storage:{tag}:hydria"], check=True)
    try:
        _export_tree(f"{tag}:podman", tmp_path / "podman")
        _export_tree(f"{tag}:hydria", tmp_path / "hydria")
        ours, their = snapshot(tmp_path / "hydria"), snapshot(tmp_path / "podman")
        differing = {path for path in ours[0].keys() | their[0].keys() if ours[0].get(path) != their[0].get(path)}
        # buildah (podman 4.3, chroot isolation) leaves the empty mount point of /etc/hosts in a
        # layer where the base has none; BuildKit leaves nothing, as hydria
        if "etc/hosts" not in ours[0] and getattr(their[0].get("etc/hosts"), "content", None) == EMPTY_SHA256:
            differing.discard("etc/hosts")
        assert not differing, {p: (ours[0].get(p), their[0].get(p)) for p in sorted(differing)[:20]}
        assert ours[1] == their[1]  # the same hard links
        mine = json.loads(_podman("image", "inspect", f"{tag}:hydria"))[0]["Config"]
        theirs = json.loads(_podman("image", "inspect", f"{tag}:podman"))[0]["Config"]
        theirs["Labels"].pop("io.buildah.version", None)  # buildah's own
        for field in ("Env", "Cmd", "Entrypoint", "WorkingDir", "Labels", "Volumes", "User"):
            assert mine.get(field) == theirs.get(field), field
    finally:
        subprocess.run(["podman", "rmi", "-f", f"{tag}:podman", f"{tag}:hydria"], capture_output=True, check=False)


def test_with_one_id_mapped_every_file_belongs_to_root_and_the_build_says_so(debian: PublishedImage,
                                                                            workspace: Workspace) -> None:
    context = make_context(workspace, {"Dockerfile": f"""FROM {base_of(debian)}
RUN useradd -u 1500 app && install -d -o app /var/app && stat -c %u /var/app
USER app
RUN id -u
"""})
    result = build(workspace, "--oci", "layout", str(context), HYDRIA_BUILD_SUBORDINATE_IDS="n")
    assert result.returncode == 0, result.stderr
    assert "steps run as root with one ID mapped: every file belongs to root" in result.stderr
    assert "USER app: RUN runs as root" in result.stderr
    assert result.stdout.split() == ["0", "0"]  # chown "succeeded" without effect; RUN as root


def test_a_refused_id_mapping_falls_back_to_one_id(debian: PublishedImage, workspace: Workspace) -> None:
    """newuidmap refuses (ranges an administrator got wrong, a build in a user namespace already):
    the build says so and maps one ID."""
    fake = workspace.out / "fake-bin"
    fake.mkdir()
    for tool in ("newuidmap", "newgidmap"):
        (fake / tool).write_text("#!/bin/sh\necho 'newuidmap: uid range [1-65537) -> [100000-165536) not allowed' >&2\nexit 1\n")
        (fake / tool).chmod(0o755)
    context = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\nRUN stat -c %u /etc\n"})
    result = build(workspace, "--oci", "layout", str(context), PATH=f"{fake}:/usr/sbin:/usr/bin:/sbin:/bin")
    assert result.returncode == 0, result.stderr
    assert "newuidmap refused the mapping of your subordinate IDs (newuidmap: uid range" in result.stderr
    assert "building with one ID mapped" in result.stderr and "steps run as root with one ID mapped" in result.stderr


def test_what_steps_made_for_other_owners_is_pruned_and_cleaned_up(debian: PublishedImage,
                                                                  workspace: Workspace) -> None:
    """Files of subordinate IDs that the user cannot read or remove themselves: a failed step's
    folder is removed, hydria cache list counts them, hydria cache prune removes the layers' trees."""
    context = make_context(workspace, {"Dockerfile": f"""FROM {base_of(debian)}
RUN useradd -u 1500 app && install -d -o app -m 700 /var/app && \\
    head -c 3000000 /dev/urandom > /var/app/secret && chown app /var/app/secret
RUN install -d -o app -m 700 /var/other && touch /var/other/x && chown app /var/other/x && false
"""})
    result = build(workspace, "--oci", "layout", str(context))
    assert result.returncode == 1 and "exited with status 1" in result.stderr
    assert not list((workspace.cache / "build" / "work").iterdir())
    trees = list((workspace.cache / "build" / "trees").iterdir())
    assert trees and any(os.stat(tree / "var" / "app").st_uid != workspace.user.uid for tree in trees
                         if (tree / "var" / "app").exists())
    on_disk = sum(path.stat().st_size for folder in ("blobs", "bases", "trees")  # as root: every file
                  for path in (workspace.cache / "build" / folder).rglob("*") if path.is_file() and not path.is_symlink())
    listed = json.loads(workspace.run("cache", "list", "--json").stdout)
    assert listed["build_bytes"] >= on_disk > 6_000_000  # the secret, in its blob and in its tree
    long_ago = time.time() - 3600  # past the grace period of what was used in the last minutes
    for path in (workspace.cache / "build").glob("*/*"):
        os.utime(path, (long_ago, long_ago), follow_symlinks=False)
    pruned = workspace.run("cache", "prune")
    assert pruned.returncode == 0, pruned.stderr
    assert not list((workspace.cache / "build" / "trees").iterdir())


@pytest.mark.parametrize("layered", ["y", "n"])
def test_hydria_cache_lists_and_prunes_the_build_cache(debian: PublishedImage, workspace: Workspace,
                                                       layered: str) -> None:
    """The base image is kept as layer images in the image cache (layered images, the default),
    or merged into one file in the build cache; a prune takes either."""
    context = make_context(workspace, {"Dockerfile": f"""FROM {base_of(debian)}
RUN --mount=type=cache,target=/root/.cache echo data > /root/.cache/kept && echo layer > /layer.txt
"""})
    built(workspace, "-o", "one.sqsh", str(context), HYDRIA_LAYERED_IMAGES=layered)
    listed = json.loads(workspace.run("cache", "list", "--json").stdout)
    base = 1 if layered == "n" else 0
    assert listed["build"] == {"layer": 1, "base": base, "output": 1, "mount": 1} and listed["build_bytes"] > 0
    assert listed["images"] == 1 - base, listed  # the base's layered image
    fresh = workspace.run("cache", "prune")
    assert fresh.returncode == 0 and "removed 0 file(s)" in fresh.stdout  # all used in the last minutes
    long_ago = time.time() - 3600
    for path in (*(workspace.cache / "build").glob("*/*"), *workspace.cache.glob("images.*/*")):
        os.utime(path, (long_ago, long_ago), follow_symlinks=False)
    pruned = workspace.run("cache", "prune")
    assert pruned.returncode == 0, pruned.stderr
    after = json.loads(workspace.run("cache", "list", "--json").stdout)
    assert after["build"] == {"layer": 0, "base": 0, "output": 0, "mount": 0} and after["images"] == 0, after
    assert not list((workspace.cache / "build" / "trees").iterdir())
    again = built(workspace, "-o", "one.sqsh", str(context), HYDRIA_LAYERED_IMAGES=layered)
    assert "CACHED" not in again and " DONE " in again


def test_add_downloads_a_url_and_checks_its_checksum(debian: PublishedImage, workspace: Workspace,
                                                     tmp_path: Path) -> None:
    import functools
    import hashlib
    import http.server
    import threading

    served = tmp_path / "served"
    served.mkdir()
    (served / "tool.tar.gz").write_bytes(tar_of({"inside": ("x", 0)}))
    digest = hashlib.sha256((served / "tool.tar.gz").read_bytes()).hexdigest()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/tool.tar.gz"
    try:
        context = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\n"
                                                         f"ADD --checksum=sha256:{digest} {url} /opt/\n"})
        built(workspace, "-o", "url.sqsh", str(context))
        listing = subprocess.run(["unsquashfs", "-lln", str(workspace.out / "url.sqsh")], capture_output=True,
                                 text=True, check=True).stdout
        line = next(line for line in listing.splitlines() if line.endswith("/opt/tool.tar.gz"))
        assert line.startswith("-rw-------")  # downloaded as it is, not unpacked
        (context / "Dockerfile").write_text(f"FROM {base_of(debian)}\nADD --checksum=sha256:{'0' * 64} {url} /opt/\n")
        result = build(workspace, "-o", "bad.sqsh", str(context))
        assert result.returncode == 1 and f"the download is sha256:{digest}, --checksum says" in result.stderr
        (context / "Dockerfile").write_text(f"FROM {base_of(debian)}\nCOPY {url} /opt/\n")
        result = build(workspace, "-o", "bad.sqsh", str(context))
        assert result.returncode == 1 and "COPY takes no URLs" in result.stderr
    finally:
        server.shutdown()


def test_a_context_of_any_depth_is_copied(debian: PublishedImage, workspace: Workspace) -> None:
    levels = 1100  # past Python's recursion limit, within PATH_MAX
    context = make_context(workspace, {"Dockerfile": f"FROM {base_of(debian)}\nCOPY tree /tree\n"})
    folder = os.open(context, os.O_RDONLY)
    for name in ["tree", *["d"] * levels]:  # made level by level: pathlib's mkdir recurses
        os.mkdir(name, dir_fd=folder)
        os.chown(name, workspace.user.uid, workspace.user.gid, dir_fd=folder)
        inner = os.open(name, os.O_RDONLY, dir_fd=folder)
        os.close(folder)
        folder = inner
    leaf = os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=folder)
    os.write(leaf, b"deep\n")
    os.close(leaf)
    os.close(folder)
    built(workspace, "-o", "deep.sqsh", str(context))
    deep = "/".join(["d"] * levels)
    out = workspace.run("start", str(workspace.out / "deep.sqsh"), "cat", f"/tree/{deep}/leaf.txt")
    assert out.stdout == "deep\n", out.stderr[-500:]


def test_an_sshd_image_for_multi_node_runs_builds_from_debian_packages(debian: PublishedImage,
                                                                       workspace: Workspace) -> None:
    context = make_context(workspace, {"Dockerfile": f"""FROM {base_of(debian)}
RUN apt-get update -q && apt-get install -y -q --no-install-recommends openssh-server openssh-client && \\
    rm -rf /var/lib/apt/lists/* && mkdir -p /run/sshd
RUN ssh-keygen -A
EXPOSE 22
CMD ["/usr/sbin/sshd", "-D", "-e"]
"""})
    result = build(workspace, "-o", "sshd.sqsh", str(context))
    assert result.returncode == 0, result.stderr
    assert "Setting up openssh-server" in result.stdout  # the package's scripts ran (its sshd user, its keys)
    out = workspace.run("start", "--root", str(workspace.out / "sshd.sqsh"), "sh", "-c",
                        "/usr/sbin/sshd -t && echo config-ok; id -u sshd; ls /etc/ssh/ssh_host_ed25519_key.pub")
    assert out.stdout.splitlines() == ["config-ok", "100", "/etc/ssh/ssh_host_ed25519_key.pub"], out.stderr
