"""CCP_KERNEL_SRC checks and the choice of ccp-kernel branch per kernel (no module source needed)."""

import shutil
import subprocess

import pytest

from kmod import source

NEW_SIG = "void tcp_ccp_cong_control(struct sock *sk, u32 ack, int flag, const struct rate_sample *rs) {\n}\n"
OLD_SIG = "void tcp_ccp_cong_control(struct sock *sk, const struct rate_sample *rs) {\n}\n"
TCP_H_610 = "struct tcp_congestion_ops {\n\tvoid (*cong_control)(struct sock *sk, u32 ack, int flag,\n\t\t\t     const struct rate_sample *rs);\n};"
TCP_H_61 = "struct tcp_congestion_ops {\n\tvoid (*cong_control)(struct sock *sk, const struct rate_sample *rs);\n};"


def fake_tree(path, sig=NEW_SIG):
    for f in source.REQUIRED_FILES:
        (path / f).parent.mkdir(parents=True, exist_ok=True)
        (path / f).write_text("x\n")
    (path / "tcp_ccp.c").write_text(sig)
    return path


def test_missing_or_wrong_source_names_ccp_kernel_src(tmp_path):
    with pytest.raises(source.SourceError, match="CCP_KERNEL_SRC is not set"):
        source.check_tree(None)
    with pytest.raises(source.SourceError, match="CCP_KERNEL_SRC=.*no such directory"):
        source.check_tree(tmp_path / "nope")
    tree = fake_tree(tmp_path / "k")
    (tree / "libccp" / "ccp.c").unlink()
    with pytest.raises(source.SourceError, match=r"not a ccp-kernel tree: missing libccp/ccp.c \(git submodule"):
        source.check_tree(tree)
    (tree / "libccp" / "ccp.c").write_text("x")
    assert source.check_tree(tree) == tree.resolve()


def test_signatures_are_counted_in_source_and_headers():
    assert source.source_cong_control_params(NEW_SIG) == 4
    assert source.source_cong_control_params(OLD_SIG) == 2
    assert source.headers_cong_control_params(TCP_H_610) == 4
    assert source.headers_cong_control_params(TCP_H_61) == 2
    with pytest.raises(source.SourceError, match="no definition of tcp_ccp_cong_control"):
        source.source_cong_control_params("int main(void) {}")
    with pytest.raises(source.SourceError, match="no cong_control member"):
        source.headers_cong_control_params("struct x {};")


def test_pick_takes_the_matching_candidate_or_says_what_each_has():
    c = [source.Candidate(None, 4), source.Candidate("origin/4.19-6.9-compat", 2)]
    assert source.pick(c, 4, "6.12").ref is None
    assert source.pick(c, 2, "6.1").ref == "origin/4.19-6.9-compat"
    with pytest.raises(source.SourceError, match=r"fits kernel 7.0: its cong_control takes 3 .*work tree: 4"):
        source.pick(c, 3, "7.0")


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_branches_of_a_checkout_are_candidates_and_export_with_the_work_trees_libccp(tmp_path):
    tree = fake_tree(tmp_path / "k")

    def git(*a):
        subprocess.run(["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t", *a],
                       check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-qm", "new")
    git("checkout", "-q", "-b", "compat")
    (tree / "tcp_ccp.c").write_text(OLD_SIG)
    git("commit", "-qam", "old")
    git("checkout", "-q", "main")
    cands = source.candidates(tree)
    assert [(c.label, c.params) for c in cands] == [("work tree", 4), ("compat", 2), ("main", 4)]
    chosen = source.pick(cands, 2, "6.1")
    out = source.export(tree, chosen, tmp_path / "out")
    assert (out / "tcp_ccp.c").read_text() == OLD_SIG
    assert (out / "libccp" / "ccp.c").exists()
    assert not (out / ".git").exists()
