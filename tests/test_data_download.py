"""`sparsecse data download` against a local HTTP server on 127.0.0.1 (no network): archives are built
in the test from files of the shared SentEval data; the server counts requests and bytes and can cut
a transfer short, ignore Range requests, or serve a damaged archive."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import tarfile
import threading
from pathlib import Path

import pytest

from sparsecse.artifacts.download import RECORD, archive_root, install_archive, part_path
from sparsecse.data.paths import resolve_data_dir
from sparsecse.data.sources import SENTEVAL, missing_files
from sparsecse.data.sts import read_sts_benchmark
from sparsecse.errors import SparseCSEError
from tests.helpers import cli

FEW = ("STS/STSBenchmark/sts-dev.csv", "SICK/SICK_trial.txt", "MR/rt-polarity.pos")


def tar_bytes(root: Path, names, prefix: str = "", extra: dict[str, bytes] | None = None) -> bytes:
    """An uncompressed tar of ``root/name`` for each name, stored as ``prefix + name``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in names:
            tar.add(root / name, arcname=prefix + name, recursive=False)
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ArchiveServer(http.server.ThreadingHTTPServer):
    """Serves ``files`` (path -> bytes) with Range support; records each request and the bytes sent."""

    def __init__(self, files: dict[str, bytes]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files = files
        self.requests: list[tuple[str, str | None]] = []
        self.bytes_served = 0
        self.cut_after: int | None = None  # the next response stops after this many body bytes
        self.honour_range = True

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        server: ArchiveServer = self.server
        asked = self.headers.get("Range")
        server.requests.append((self.path, asked))
        if self.path not in server.files:
            self.send_error(404)
            return
        body = server.files[self.path]
        start = int(asked.removeprefix("bytes=").rstrip("-")) if asked and server.honour_range else 0
        if start >= len(body):
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{len(body)}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        chunk = body[start:]
        if server.cut_after is not None:
            chunk, server.cut_after = chunk[: server.cut_after], None
            self.close_connection = True
        server.bytes_served += len(chunk)  # counted before sending: the client may be done before write() returns
        self.wfile.write(chunk)

    def log_message(self, *args):
        pass


@pytest.fixture
def serve():
    servers = []

    def start(files: dict[str, bytes]) -> ArchiveServer:
        server = ArchiveServer(files)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def leftovers(folder: Path) -> list[str]:
    """Hidden temporaries, partial downloads and locks left in ``folder``."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def install(url, dest, archive: bytes | None = None, required=FEW, **kwargs):
    return install_archive("few.tar", [url], dest, sha(archive) if archive else None, required,
                           progress=False, **kwargs)


def test_fresh_directory_fills_and_a_second_run_downloads_nothing(serve, senteval_dir, tmp_path):
    archive = tar_bytes(senteval_dir, FEW)
    server = serve({"/few.tar": archive})
    dest = tmp_path / "cache" / "senteval"  # neither it nor its parent exists yet
    record = install(server.url("/few.tar"), dest, archive)
    assert record["already_there"] is False and record["sha256_verified"] is True
    assert record["downloaded_bytes"] == len(archive) and record["sha256"] == sha(archive)
    for name in FEW:
        assert (dest / name).read_bytes() == (senteval_dir / name).read_bytes()
    assert json.loads((dest / RECORD).read_text())["url"] == server.url("/few.tar")
    assert leftovers(dest.parent) == [] and len(server.requests) == 1

    again = install(server.url("/few.tar"), dest, archive)
    assert again["already_there"] is True and again["downloaded_bytes"] == 0
    assert len(server.requests) == 1  # nothing was asked of the server


def test_force_downloads_again_and_replaces(serve, senteval_dir, tmp_path):
    archive = tar_bytes(senteval_dir, FEW)
    server = serve({"/few.tar": archive})
    dest = tmp_path / "senteval"
    install(server.url("/few.tar"), dest, archive)
    (dest / "stray.txt").write_text("not from the archive")
    install(server.url("/few.tar"), dest, archive, force=True)
    assert len(server.requests) == 2 and not (dest / "stray.txt").exists() and (dest / FEW[0]).is_file()


def test_wrong_checksum_is_refused_before_anything_is_unpacked(serve, senteval_dir, tmp_path):
    archive = tar_bytes(senteval_dir, FEW)
    damaged = bytearray(archive)
    damaged[len(damaged) // 2] ^= 0xFF
    server = serve({"/few.tar": bytes(damaged)})
    dest = tmp_path / "senteval"
    with pytest.raises(SparseCSEError, match=f"has SHA-256 {sha(bytes(damaged))}, not the expected {sha(archive)}"):
        install(server.url("/few.tar"), dest, archive)
    assert not dest.exists() and leftovers(tmp_path) == []  # the bad download is not kept to resume


def test_truncated_archive_leaves_nothing_half_extracted(serve, senteval_dir, tmp_path):
    archive = tar_bytes(senteval_dir, FEW)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        last = tar.getmembers()[-1]
    cut = archive[: last.offset_data + last.size // 2]  # two whole members, then half of the third
    server = serve({"/few.tar": cut})
    dest = tmp_path / "senteval"
    with pytest.raises(SparseCSEError, match="few.tar from http.* is not a readable tar file"):
        install(server.url("/few.tar"), dest)  # no checksum to compare: the tar itself must be refused
    assert not dest.exists() and leftovers(tmp_path) == []


def test_member_escaping_the_directory_is_refused(serve, senteval_dir, tmp_path):
    archive = tar_bytes(senteval_dir, FEW, extra={"../escaped.txt": b"outside"})
    server = serve({"/few.tar": archive})
    dest = tmp_path / "inner" / "senteval"
    with pytest.raises(SparseCSEError, match="holds a member that may not be unpacked .*outside the destination"):
        install(server.url("/few.tar"), dest, archive)
    assert not dest.exists() and not (tmp_path / "inner" / "escaped.txt").exists()
    assert leftovers(tmp_path / "inner") == [part_path(dest, "few.tar").name]  # verified, kept for a rerun


def test_interrupted_download_resumes_where_it_stopped(serve, senteval_dir, tmp_path):
    archive = tar_bytes(senteval_dir, FEW)
    server = serve({"/few.tar": archive})
    server.cut_after = len(archive) // 3
    dest = tmp_path / "senteval"
    with pytest.raises(SparseCSEError, match="run the command again to resume"):
        install(server.url("/few.tar"), dest, archive)
    assert part_path(dest, "few.tar").stat().st_size == len(archive) // 3 and not dest.exists()

    record = install(server.url("/few.tar"), dest, archive)
    assert server.requests[-1][1] == f"bytes={len(archive) // 3}-"
    assert server.bytes_served == len(archive)  # no byte was sent twice
    assert record["downloaded_bytes"] == len(archive) - len(archive) // 3
    assert (dest / FEW[0]).read_bytes() == (senteval_dir / FEW[0]).read_bytes()
    assert leftovers(tmp_path) == []


def test_complete_part_file_is_not_downloaded_again(serve, senteval_dir, tmp_path):
    archive = tar_bytes(senteval_dir, FEW)
    server = serve({"/few.tar": archive})
    dest = tmp_path / "senteval"
    part_path(dest, "few.tar").write_bytes(archive)  # a run that was stopped after the transfer
    record = install(server.url("/few.tar"), dest, archive)
    assert record["downloaded_bytes"] == 0 and server.bytes_served == 0 and (dest / FEW[1]).is_file()


def test_server_ignoring_range_sends_the_whole_file_again(serve, senteval_dir, tmp_path):
    archive = tar_bytes(senteval_dir, FEW)
    server = serve({"/few.tar": archive})
    server.honour_range = False
    dest = tmp_path / "senteval"
    part_path(dest, "few.tar").write_bytes(b"x" * 100)  # would corrupt the archive if appended to
    record = install(server.url("/few.tar"), dest, archive)
    assert record["downloaded_bytes"] == len(archive) and (dest / FEW[2]).is_file()


def test_layout_under_a_folder_is_unpacked_at_the_top(serve, senteval_dir, tmp_path):
    archive = tar_bytes(senteval_dir, FEW, prefix="downstream/")
    server = serve({"/few.tar": archive})
    dest = tmp_path / "senteval"
    install(server.url("/few.tar"), dest, archive)
    assert (dest / FEW[0]).is_file() and not (dest / "downstream").exists()
    assert archive_root(["a/b/STS/x", "b/STS/x"], ("STS/x",)) == "b/"


def test_archive_without_the_layout_is_refused(serve, senteval_dir, tmp_path):
    archive = tar_bytes(senteval_dir, FEW[1:])
    server = serve({"/few.tar": archive})
    with pytest.raises(SparseCSEError, match="no STS/STSBenchmark/sts-dev.csv"):
        install(server.url("/few.tar"), tmp_path / "senteval", archive)
    archive = tar_bytes(senteval_dir, FEW[:2])
    server.files["/few.tar"] = archive
    with pytest.raises(SparseCSEError, match="lacks 1 of the files .*MR/rt-polarity.pos"):
        install(server.url("/few.tar"), tmp_path / "other", archive)
    assert not (tmp_path / "senteval").exists() and not (tmp_path / "other").exists()


def test_unreachable_sources_are_named_and_the_next_one_is_tried(serve, senteval_dir, tmp_path):
    archive = tar_bytes(senteval_dir, FEW)
    server = serve({"/few.tar": archive})
    with pytest.raises(SparseCSEError, match="answered HTTP 404"):
        install(server.url("/missing.tar"), tmp_path / "a")
    closed = ArchiveServer({})  # bound, then closed: nothing listens on its port
    closed.server_close()
    with pytest.raises(SparseCSEError, match="Cannot reach http://127.0.0.1"):
        install(closed.url("/few.tar"), tmp_path / "a")
    record = install_archive("few.tar", [server.url("/missing.tar"), server.url("/few.tar")], tmp_path / "b",
                             sha(archive), FEW, progress=False)
    assert record["url"] == server.url("/few.tar") and (tmp_path / "b" / FEW[0]).is_file()
    assert not (tmp_path / "a").exists()


def test_existing_directory_with_other_files_is_not_replaced_without_force(serve, senteval_dir, tmp_path):
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "notes.txt").write_text("keep me")
    with pytest.raises(SparseCSEError, match="exists but lacks 3 of the 3 data files .*--force"):
        install("http://127.0.0.1:9/never-asked", dest)
    assert (dest / "notes.txt").read_text() == "keep me"


def test_cli_fills_the_default_directory_with_the_full_set(serve, senteval_dir, tmp_path, monkeypatch):
    files = sorted(str(p.relative_to(senteval_dir)) for p in senteval_dir.rglob("*") if p.is_file())
    archive = tar_bytes(senteval_dir, files)
    server = serve({"/senteval.tar": archive})
    dest = tmp_path / "data"
    monkeypatch.setenv("SPARSECSE_DATA", str(dest))
    result = cli("data", "download", "--source", server.url("/senteval.tar"), "--sha256", sha(archive), "--quiet")
    assert result.exit_code == 0, result.output
    assert f"into {dest} (" in result.output and "SHA-256 verified" in result.output
    assert "--data-dir" not in result.output  # the default directory needs no option
    assert missing_files(dest) == [] and resolve_data_dir() == dest  # every file the readers open
    assert read_sts_benchmark(dest, "dev") == read_sts_benchmark(senteval_dir, "dev")

    again = cli("data", "download", "--source", server.url("/senteval.tar"), "--json")
    assert json.loads(again.output)["already_there"] is True and len(server.requests) == 1


def test_cli_names_where_the_data_went_and_how_to_read_it(serve, senteval_dir, tmp_path, monkeypatch):
    archive = tar_bytes(senteval_dir, FEW)
    server = serve({"/senteval.tar": archive})
    monkeypatch.setattr("sparsecse.data.sources.SENTEVAL", SENTEVAL.__class__(
        name="senteval.tar", urls=(server.url("/senteval.tar"),), sha256=None, required=FEW, description="few"))
    result = cli("data", "download", "--to", tmp_path / "elsewhere", "--quiet")
    assert result.exit_code == 0, result.output
    assert "no published SHA-256 is recorded for senteval.tar; it has " + sha(archive) in result.output
    assert f"--data-dir {tmp_path / 'elsewhere'}" in result.output


def test_cli_errors_are_one_sentence(serve, tmp_path):
    server = serve({})
    (tmp_path / "file").write_text("")
    result = cli("data", "download", "--to", tmp_path / "file" / "senteval", "--source", server.url("/x.tar"))
    assert result.exit_code == 1 and "is a file, not a directory" in result.output and not server.requests
    result = cli("data", "download", "--to", tmp_path / "d", "--source", server.url("/senteval.tar"))
    assert result.exit_code == 1 and "HTTP 404" in result.output and "Traceback" not in result.output
    result = cli("data", "download", "--to", tmp_path / "d", "--sha256", "abc")
    assert result.exit_code == 1 and "not a SHA-256" in result.output


def test_missing_data_names_the_download_command(tmp_path):
    result = cli("eval", "--tasks", "STSBenchmark", env={"SPARSECSE_DATA": str(tmp_path / "none")})
    assert result.exit_code == 1 and "`sparsecse data download` fetches the SentEval data there" in result.output
    with pytest.raises(SparseCSEError, match=f"`sparsecse data download --to {tmp_path / 'x'}`"):
        resolve_data_dir(tmp_path / "x")
    with pytest.raises(SparseCSEError, match="STSBenchmark data is missing.*sparsecse data download --force"):
        read_sts_benchmark(tmp_path, "dev")
