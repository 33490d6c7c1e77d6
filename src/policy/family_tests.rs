//! Table tests of the deny-list families of issue 25.6 — interpreter
//! one-liners that remove or write outside the lane, git configuration and
//! environment overrides aimed outside it, links to secret paths, huge
//! allocations, processes detached from the tool call — each with the
//! words its refusal must contain, and a list of everyday near-miss
//! commands none of them may refuse.

use super::{BashPolicy, Decision};

fn decide(cmd: &str) -> Decision {
    BashPolicy::default().decide(cmd)
}

/// `(command, words the refusal must contain)`, per family.
const DENIED: &[(&str, &str)] = &[
    // Interpreter one-liners removing or writing outside the lane.
    (
        "python3 -c \"import shutil; shutil.rmtree('/home/alice')\"",
        "recursive delete",
    ),
    (
        "python3 -c \"import shutil; shutil.rmtree('/srv/data')\"",
        "removes `/srv/data`, outside the worktree",
    ),
    (
        "python3 -c \"import os; os.remove('/srv/app/config.yml')\"",
        "calls `os.remove('/srv/app/config.yml')`, which removes",
    ),
    (
        "python3 -c \"import os; os.unlink('../../other/file')\"",
        "outside the worktree",
    ),
    (
        "python3 -c \"open('/opt/app/x.cfg', 'w').write('y')\"",
        "writes `/opt/app/x.cfg`",
    ),
    (
        "python3 -c \"open('/opt/app/x.cfg', mode='a').write('y')\"",
        "writes `/opt/app/x.cfg`",
    ),
    (
        "python -c \"from pathlib import Path; Path('/srv/x').write_text('y')\"",
        "writes `/srv/x`",
    ),
    (
        "python3 -c \"import pathlib; pathlib.Path('/srv/x').unlink()\"",
        "removes `/srv/x`",
    ),
    (
        "python3 -c \"import shutil; shutil.move('a.txt', '/srv/a.txt')\"",
        "writes `/srv/a.txt`",
    ),
    (
        "python3 -c \"import os; os.rename('/srv/a', 'b')\"",
        "removes `/srv/a`",
    ),
    (
        "python3 -c \"import os; os.makedirs('/opt/new')\"",
        "writes `/opt/new`",
    ),
    (
        "python3 -c \"open('/root/.bashrc', 'a').write('x')\"",
        "outside the worktree",
    ),
    (
        "python3 -c \"open('/tmp/shared.txt', 'w').write('x')\"",
        "writes `/tmp/shared.txt`",
    ),
    ("perl -e 'unlink \"/home/alice/.bashrc\"'", "calls `unlink"),
    ("perl -e 'unlink(\"/srv/x\")'", "removes `/srv/x`"),
    (
        "perl -e 'open(F, \">\", \"/srv/x\"); print F 1'",
        "writes `/srv/x`",
    ),
    ("perl -e 'open(my $f, \">>/srv/log\")'", "writes `/srv/log`"),
    (
        "node -e \"require('fs').rmSync('/srv/x', {recursive: true})\"",
        "removes `/srv/x`",
    ),
    (
        "node -e \"require('fs').unlinkSync('/srv/x')\"",
        "removes `/srv/x`",
    ),
    (
        "node -e \"require('fs').writeFileSync('/srv/x', 'y')\"",
        "writes `/srv/x`",
    ),
    (
        "node -e \"fs.appendFileSync('/srv/x', 'y')\"",
        "writes `/srv/x`",
    ),
    ("ruby -e \"File.delete('/srv/x')\"", "removes `/srv/x`"),
    ("ruby -e \"File.write('/srv/x', 'y')\"", "writes `/srv/x`"),
    (
        "ruby -e \"require 'fileutils'; FileUtils.rm_rf('/srv/x')\"",
        "removes `/srv/x`",
    ),
    (
        "bash -c \"python3 -c \\\"import os; os.remove('/srv/x')\\\"\"",
        "removes `/srv/x`",
    ),
    (
        "python3 -c \"print(open('/root/.ssh/id_rsa').read())\"",
        "reading a secret",
    ),
    // git configuration and environment aimed outside the lane.
    (
        "git -c core.hooksPath=/tmp/x commit -m y",
        "`core.hooksPath` outside this worktree",
    ),
    (
        "git -c core.hookspath=../../hooks commit -m y",
        "outside this worktree",
    ),
    ("git -c core.worktree=/repo status", "`core.worktree`"),
    ("git -c include.path=/tmp/evil.cfg log", "`include.path`"),
    (
        "git -c includeIf.gitdir:/.path=/tmp/e log",
        "outside this worktree",
    ),
    (
        "git -c core.fsmonitor=/tmp/monitor.sh status",
        "`core.fsmonitor`",
    ),
    (
        "git --config-env=core.hooksPath=HOOKS commit -m y",
        "`core.hooksPath`",
    ),
    (
        "GIT_DIR=/repo/.git git update-ref refs/heads/main HEAD",
        "`GIT_DIR=/repo/.git` points git outside",
    ),
    (
        "GIT_WORK_TREE=/repo git checkout .",
        "`GIT_WORK_TREE=/repo`",
    ),
    (
        "env GIT_DIR=../../.git git update-ref -d refs/heads/main",
        "points git outside",
    ),
    (
        "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=/tmp/h git commit -m y",
        "`GIT_CONFIG_KEY_0`",
    ),
    (
        "GIT_CONFIG_PARAMETERS=\"'core.hooksPath'='/tmp/h'\" git commit -m y",
        "`GIT_CONFIG_PARAMETERS`",
    ),
    (
        "GIT_EXEC_PATH=/tmp/gitexec git status",
        "`GIT_EXEC_PATH=/tmp/gitexec`",
    ),
    (
        "R=/repo; GIT_DIR=$R/.git git update-ref refs/heads/main HEAD",
        "points git outside",
    ),
    (
        "export GIT_DIR=/repo/.git; git update-ref refs/heads/main HEAD",
        "points git outside",
    ),
    // Links to secret paths.
    ("ln -s ~/.ssh/id_rsa k", "keys or credentials"),
    ("ln -s ~/.ssh/id_rsa k && cat k", "keys or credentials"),
    ("ln -s /root/.ssh keys", "keys or credentials"),
    ("ln -sf $HOME/.aws/credentials c", "keys or credentials"),
    ("ln -s ~ h", "makes a link to the home directory"),
    ("ln -s $HOME home", "makes a link to the home directory"),
    (
        "ln -s ~/.config cfg",
        "a directory holding the user's credentials",
    ),
    ("ln -s ~/.bashrc b", "startup configuration"),
    ("ln ~/.netrc n", "keys or credentials"),
    ("ln -s -t . ~/.ssh/id_ed25519", "keys or credentials"),
    (
        "python3 -c \"import os; os.symlink('/root/.ssh/id_rsa', 'k')\"",
        "makes a link to",
    ),
    (
        "node -e \"require('fs').symlinkSync('/root/.ssh', 'k')\"",
        "makes a link to",
    ),
    // Huge allocations.
    ("fallocate -l 50G f", "allocates 50.0 GiB"),
    ("fallocate --length=10GiB f", "allocates 10.0 GiB"),
    ("fallocate -l50g f", "allocates 50.0 GiB"),
    ("truncate -s 50G big", "allocates 50.0 GiB"),
    ("truncate --size=+20G big", "allocates 20.0 GiB"),
    ("dd if=/dev/zero of=big bs=1G count=50", "writes 50.0 GiB"),
    (
        "dd if=/dev/zero of=big bs=1M count=100000",
        "writes 97.7 GiB",
    ),
    ("dd if=/dev/urandom of=big", "no `count=`"),
    ("head -c 30G /dev/zero > big", "allocates 30.0 GiB"),
    ("head --bytes=30G /dev/urandom > big", "allocates 30.0 GiB"),
    ("yes | head -c 50G > f", "allocates 50.0 GiB"),
    ("xfs_mkfile 20g f", "allocates 20.0 GiB"),
    ("sudo fallocate -l 100G /var/big", "allocates 100.0 GiB"),
    // Processes detached from the tool call.
    ("nohup sh -c 'sleep 1000' &", "`nohup … &`"),
    (
        "nohup python3 -m http.server 8000 > log 2>&1 &",
        "`nohup … &`",
    ),
    ("setsid sleep 1000", "`setsid`"),
    ("setsid -f python3 server.py", "`setsid`"),
    ("sleep 100 & disown", "`disown`"),
    ("screen -dmS srv python3 server.py", "`screen`"),
    ("tmux new-session -d -s srv 'python3 server.py'", "`tmux`"),
    ("bash -c 'nohup ./server &'", "`nohup … &`"),
    ("echo 'rm -rf build' | at now + 1 hour", "`at`"),
    ("systemd-run --user sleep 1000", "`systemd-run`"),
    (
        "start-stop-daemon --start --background --exec /usr/bin/srv",
        "`start-stop-daemon`",
    ),
];

/// Everyday commands that resemble a family: none may be refused.
const BENIGN: &[&str] = &[
    // Interpreters.
    "python3 -c \"print(1)\"",
    "python3 -c 'import sys; print(sys.version)'",
    "python3 -c \"import json,sys; print(json.load(sys.stdin)['name'])\"",
    "python3 -c \"open('out.txt', 'w').write('x')\"",
    "python3 -c \"open('build/out.txt', 'a').write('x')\"",
    "python3 -c \"print(open('/etc/os-release').read())\"",
    "python3 -c \"print(open('README.md').read()[:100])\"",
    "python3 -c \"import os; os.remove('build/x.o')\"",
    "python3 -c \"import os; os.makedirs('build/out', exist_ok=True)\"",
    "python3 -c \"import shutil; shutil.rmtree('build')\"",
    "python3 -c \"import shutil; shutil.copy('a.txt', 'b.txt')\"",
    "python3 -c \"import shutil; shutil.move('a.txt', 'docs/a.txt')\"",
    "python3 -c \"import os; os.rename('old.py', 'new.py')\"",
    "python3 -c \"import tempfile; open(tempfile.mktemp(), 'w').write('y')\"",
    "python3 -c \"import os; open(os.environ['TMPDIR'] + '/x', 'w').write('y')\"",
    "python3 -c \"from pathlib import Path; Path('src/gen.py').write_text('x = 1')\"",
    "python3 -c \"from pathlib import Path; print(Path('/usr/lib').exists())\"",
    "python3 -c \"print('/usr/bin'.replace('/usr', '/opt'))\"",
    "python3 -c \"import sys; sys.stdout.write('/srv/data\\n')\"",
    "python3 -c \"l = ['/a', '/b']; l.remove('/a'); print(l)\"",
    "python3 -c \"import os; print(os.path.expanduser('~'))\"",
    "python3 -c \"import os; print(os.listdir('/etc'))\"",
    "python3 -m pytest -q",
    "python3 -m venv .venv",
    "python3 setup.py build",
    "perl -e 'print \"hello\\n\"'",
    "perl -ne 'print if /TODO/' src/main.c",
    "perl -pi -e 's/foo/bar/g' src/lib.rs",
    "perl -e 'unlink \"build/x.o\"'",
    "perl -e 'open(F, \">\", \"out.txt\"); print F 1'",
    "perl -e 'open(F, \"<\", \"/etc/hosts\"); print <F>'",
    "node -e \"console.log(process.version)\"",
    "node -e \"require('fs').writeFileSync('dist/x.js', 'y')\"",
    "node -e \"require('fs').rmSync('dist', {recursive: true, force: true})\"",
    "node -e \"console.log(require('fs').readFileSync('package.json', 'utf8'))\"",
    "node -e \"const p = require('path'); console.log(p.join('/a', 'b'))\"",
    "ruby -e 'puts RUBY_VERSION'",
    "ruby -e \"File.write('out.txt', 'y')\"",
    "ruby -e \"puts File.read('/etc/hostname')\"",
    // git.
    "git -c user.name=x commit -m y",
    "git -c user.email=x@y commit --amend --no-edit",
    "git -c core.pager=cat log -n 3",
    "git -c color.ui=always diff",
    "git -c core.hooksPath=.githooks commit -m y",
    "git -c core.hooksPath=/dev/null commit -m y",
    "git -c core.fsmonitor=false status",
    "git -c core.quotepath=off status",
    "git -c advice.detachedHead=false checkout HEAD~1",
    "git -c init.defaultBranch=main init sub",
    "git -c protocol.version=2 fetch origin",
    "git -c diff.noprefix=true diff",
    "GIT_PAGER=cat git log -n 3",
    "GIT_TERMINAL_PROMPT=0 git fetch",
    "GIT_AUTHOR_NAME=x GIT_AUTHOR_EMAIL=x@y git commit -m y",
    "GIT_CONFIG_GLOBAL=/dev/null git status",
    "GIT_DIR=.git git log -n 1",
    "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=user.name GIT_CONFIG_VALUE_0=x git commit -m y",
    "GIT_TRACE=1 git status",
    "git config --get core.hooksPath",
    "git rev-parse --git-dir",
    "git log --oneline -n 5",
    // Links.
    "ln -s ../lib lib",
    "ln -sf ../../shared/config.yml config.yml",
    "ln -s build/bin/tool tool",
    "ln -sf /usr/bin/python3 .venv/bin/python",
    "ln -s /usr/local/lib/libfoo.so libfoo.so",
    "ln -s ~/.cache/pip pipcache",
    "ln -s $HOME/.cargo/bin/rustc rustc",
    "ln -s ~/.config/nvim nvim-config",
    "ln -s ~/projects/shared shared",
    "ln -s ~/.ssh/id_ed25519.pub key.pub",
    "ln target/release/app app",
    "ln -s /tmp/data data",
    "readlink -f lib",
    "ls -la ~/.ssh/known_hosts",
    // Allocations.
    "fallocate -l 1M f",
    "fallocate -l 100M test.img",
    "fallocate -l 1G disk.img",
    "fallocate -l 4G swap.img",
    "truncate -s 0 log.txt",
    "truncate -s 100M disk.img",
    "truncate -s -1 file.txt",
    "truncate --size=1G sparse.img",
    "dd if=/dev/zero of=disk.img bs=1M count=10",
    "dd if=/dev/zero of=disk.img bs=1M count=1024",
    "dd if=/dev/urandom of=key.bin bs=32 count=1",
    "dd if=/dev/zero of=/dev/null bs=1M count=100000",
    "dd if=image.iso of=copy.iso bs=4M",
    "dd if=/dev/urandom bs=1k count=1 | base64",
    "head -c 1024 /dev/urandom > rand.bin",
    "head -c 16 /dev/urandom | xxd -p",
    "head -c 100M /dev/zero > f",
    "head -n 20 README.md",
    "head -c -5 file.txt",
    "tail -c 1G log | wc -l",
    "df -h .",
    "du -sh target",
    // Background and long-running processes.
    "sleep 5 &",
    "python3 -m http.server 8000 & sleep 1; curl -s localhost:8000; kill $!",
    "cargo build &",
    "npm run dev & pid=$!; sleep 2; kill $pid",
    "nohup ./build.sh > build.log 2>&1",
    "nohup --version",
    "(sleep 1; echo done) &",
    "wait",
    "jobs -l",
    "tmux ls",
    "tmux new -s dev",
    "screen -ls",
    "screen -r",
    "atq",
    "systemctl --user status",
    "timeout 10 ./server",
    "watch -n 1 ls",
    "sleep 1 && echo ok",
    "echo 'nohup x &' > notes.txt",
    "grep -rn setsid src/",
    "echo \"fallocate -l 50G f\"",
    "git grep 'core.hooksPath'",
];

#[test]
fn each_family_is_refused_with_a_clear_reason() {
    let failures: Vec<String> = DENIED
        .iter()
        .filter_map(|(cmd, want)| match decide(cmd) {
            Decision::Deny(r) if r.contains(want) => None,
            other => Some(format!("{cmd:?}: {other:?} lacks {want:?}")),
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn benign_near_misses_of_the_families_are_allowed() {
    let failures: Vec<String> = BENIGN
        .iter()
        .filter_map(|cmd| match decide(cmd) {
            Decision::Allow => None,
            other => Some(format!("should allow: {cmd:?} (got {other:?})")),
        })
        .collect();
    assert!(BENIGN.len() >= 100, "{}", BENIGN.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
