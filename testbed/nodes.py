"""Test "nodes" on this machine: network namespaces on a bridge, each with its own address, for
the several-node Slurm cluster (testbed/slurm.py) and for multi-node runs without Slurm (an sshd
per node).

Node N (from 0) is the network namespace ``hydria-nodeN+1`` with address 10.199.0.(11+N) on the
bridge ``hydria-br``, whose own address 10.199.0.1 is the "head node's" (this machine's, where
slurmctld and the clients run). ``/etc/netns/NODE/hosts`` names every node; daemons started for a
node bind it over /etc/hosts in a mount namespace of their own. Nothing leaves this machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from testbed.users import User

NODE = "hydria-node"
BRIDGE = "hydria-br"
VETH = "hydria-v"  # the host's side of each node's veth pair
SUBNET = "10.199.0"
HEAD_ADDRESS = f"{SUBNET}.1"
NETNS_ETC = Path("/etc/netns")
SSH_ROOT = Path("/run/hydria-nodes/ssh")


def names(count: int) -> list[str]:
    return [f"{NODE}{i}" for i in range(1, count + 1)]


def address(index: int) -> str:
    return f"{SUBNET}.{11 + index}"


def create(count: int) -> None:
    """The bridge, and per node a network namespace joined to it by a veth pair, and its hosts
    file. Removes those of an earlier run first."""
    destroy()

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True)

    ip("link", "add", BRIDGE, "type", "bridge")
    ip("addr", "add", f"{HEAD_ADDRESS}/24", "dev", BRIDGE)
    ip("link", "set", BRIDGE, "up")
    head = os.uname().nodename.split(".")[0]  # where slurmctld and the clients run: as a cluster's nodes know it
    hosts = f"127.0.0.1 localhost\n{HEAD_ADDRESS} {head}\n" + "".join(f"{address(i)} {name}\n"
                                                                    for i, name in enumerate(names(count)))
    for i, name in enumerate(names(count)):
        outside = f"{VETH}{i}"
        ip("netns", "add", name)
        ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", name)
        ip("link", "set", outside, "master", BRIDGE, "up")
        ip("-n", name, "addr", "add", f"{address(i)}/24", "dev", "eth0")
        ip("-n", name, "link", "set", "eth0", "up")
        ip("-n", name, "link", "set", "lo", "up")
        (NETNS_ETC / name).mkdir(parents=True, exist_ok=True)
        (NETNS_ETC / name / "hosts").write_text(hosts)


def destroy() -> None:
    """Stop the nodes' sshd and whatever else still runs on a node, and remove the namespaces, their
    hosts files and the bridge."""
    subprocess.run(["pkill", "-f", f"sshd -D -f {SSH_ROOT}"], check=False)
    # A veth pair goes with its namespace only once the kernel frees the namespace, later and not
    # at all while a process still holds it: delete this side by name, which takes both at once.
    for link in Path("/sys/class/net").glob(f"{VETH}*"):
        subprocess.run(["ip", "link", "delete", link.name], stderr=subprocess.DEVNULL, check=False)
    for namespace in Path("/run/netns").glob(f"{NODE}*"):
        left = subprocess.run(["ip", "netns", "pids", namespace.name], stdout=subprocess.PIPE, text=True,
                              check=False).stdout.split()
        if left:
            subprocess.run(["kill", "-KILL", *left], stderr=subprocess.DEVNULL, check=False)
        subprocess.run(["ip", "netns", "delete", namespace.name], check=False)
        shutil.rmtree(NETNS_ETC / namespace.name, ignore_errors=True)
    subprocess.run(["ip", "link", "delete", BRIDGE], stderr=subprocess.DEVNULL, check=False)


def in_node(name: str, argv: list[str]) -> list[str]:
    """``argv`` run on node ``name``: its network namespace, a UTS namespace named after it, and a
    mount namespace with its hosts file (as root; drop to a user inside, e.g. with runuser)."""
    script = 'mount --bind "$2" /etc/hosts && hostname "$1" && shift 2 && exec "$@"'
    return ["nsenter", f"--net=/run/netns/{name}", "unshare", "--uts", "--mount", "--propagation=slave",
            "sh", "-c", script, "-", name, str(NETNS_ETC / name / "hosts"), *argv]


def start_sshd(count: int, user: User) -> None:
    """An sshd on every node (host keys of their own, public-key logins only) that ``user`` can
    reach from any node with a key made for it; the user's ssh client trusts the nodes."""
    SSH_ROOT.mkdir(parents=True, exist_ok=True)
    host_key = SSH_ROOT / "host_ed25519"
    if not host_key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    config = SSH_ROOT / "sshd_config"
    config.write_text(f"HostKey {host_key}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                      f"UsePAM no\nPidFile none\nAuthorizedKeysFile .ssh/authorized_keys\nAllowUsers {user.name}\n")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    # useradd leaves the password locked ("!"), which sshd takes as a locked account; "*" allows
    # key logins and still no password.
    subprocess.run(["usermod", "-p", "*", user.name], check=True)
    ssh = user.home / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    key = ssh / "id_ed25519"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (ssh / "authorized_keys").write_text((ssh / "id_ed25519.pub").read_text())
    (ssh / "config").write_text(f"Host {SUBNET}.* {NODE}*\n  StrictHostKeyChecking no\n"
                                "  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
    subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(ssh)], check=True)
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    for i, name in enumerate(names(count)):
        subprocess.Popen(in_node(name, [sshd, "-D", "-f", str(config), "-o", f"ListenAddress={address(i)}"]),
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
