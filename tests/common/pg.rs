//! A real PostgreSQL server for integration tests: [`Pg::start`] runs `initdb` into a fresh temp
//! dir and starts `postgres` on a free 127.0.0.1 port with password (SCRAM) auth over TCP.
//! Dropping the [`Pg`] stops the server (also when a test panics) and removes the temp dir.
//! The API is blocking; from an async test it is fine to call directly (it blocks only briefly).
#![allow(dead_code)]

// Declared here rather than in `common/mod.rs` because benches/cluster.rs includes this
// file on its own; the suite re-exports it as `common::ports`, so one counter serves all.
#[path = "ports.rs"]
pub mod ports;

use ports::free_port;
use std::fs::{self, OpenOptions};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Password of the `postgres` database superuser.
const PASSWORD: &str = "secretpw";
/// Database superuser (also the OS user the server runs as when the tests run as root).
const SUPERUSER: &str = "postgres";
const OS_USER: &str = "postgres";
/// Database created by [`Pg::start`], named in [`Pg::url`].
const DATABASE: &str = "cresolver";
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// A port found free can be taken by someone else before the server binds it.
const START_ATTEMPTS: usize = 3;
const LOG_TAIL_LINES: usize = 40;

/// A running PostgreSQL server in its own temp dir. See the module docs.
pub struct Pg {
    bin: PathBuf,
    run_as: RunAs,
    port: u16,
    /// The server process (when root: `runuser`/`su`, whose child is the postmaster).
    server: Option<Child>,
    /// Declared last so it is removed after `Drop::drop` has stopped the server.
    dir: tempfile::TempDir,
}

impl Pg {
    /// initdb into a fresh temp dir (chowned to `postgres` when root), start the server on a
    /// free 127.0.0.1 port with the socket dir inside the temp dir, wait until it accepts
    /// connections (up to 30 s) and create database `cresolver`. Panics with a clear message
    /// (incl. the server log tail) when PostgreSQL is missing or does not start.
    pub fn start() -> Pg {
        let bin = bin_dir();
        let run_as = RunAs::detect();
        let dir = temp_dir(&run_as);
        let pwfile = dir.path().join("pwfile");
        fs::write(&pwfile, format!("{PASSWORD}\n"))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", pwfile.display()));
        if run_as.switches_user() {
            // The server user must own its data dir and be able to create its socket here.
            let out = command_output(
                Path::new("chown"),
                Command::new("chown")
                    .args(["-R", &format!("{OS_USER}:{OS_USER}")])
                    .arg(dir.path()),
            );
            check(
                &out,
                &format!("chown -R {OS_USER} {}", dir.path().display()),
            );
        }

        let mut pg = Pg {
            bin,
            run_as,
            port: 0,
            server: None,
            dir,
        };
        let data = path_str(&pg.data_dir()).to_owned();
        let initdb = pg.bin.join("initdb");
        let out = command_output(
            &initdb,
            &mut pg.as_server_user(
                &initdb,
                &[
                    "-D",
                    &data,
                    "-U",
                    SUPERUSER,
                    &format!("--pwfile={}", path_str(&pwfile)),
                    "--auth-host=scram-sha-256",
                    "--auth-local=trust",
                    "-E",
                    "UTF8",
                    "--no-locale",
                    "--no-sync",
                ],
            ),
        );
        check(&out, &initdb.display().to_string());
        let _ = fs::remove_file(&pwfile);

        for attempt in 1..=START_ATTEMPTS {
            pg.port = free_port();
            match pg.launch() {
                Ok(()) => break,
                Err(StartError::PortTaken) if attempt < START_ATTEMPTS => continue,
                Err(StartError::PortTaken) => pg.fail(&format!(
                    "PostgreSQL could not bind a free port in {START_ATTEMPTS} attempts"
                )),
                Err(StartError::Failed(why)) => pg.fail(&why),
            }
        }
        pg.psql_in("postgres", &format!("CREATE DATABASE {DATABASE}"));
        pg
    }

    /// `postgres://postgres:secretpw@127.0.0.1:PORT/cresolver`
    pub fn url(&self) -> String {
        format!(
            "postgres://{SUPERUSER}:{PASSWORD}@127.0.0.1:{}/{DATABASE}",
            self.port
        )
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The password in the URL (so tests can assert it never appears in output).
    pub fn password(&self) -> &'static str {
        PASSWORD
    }

    /// Stops the server ("fast" shutdown: existing connections are cut) and waits until it
    /// has exited and its port is closed. Does nothing when it is not running.
    pub fn stop(&mut self) {
        let Some(mut child) = self.server.take() else {
            return;
        };
        match self.postmaster_pid(&child) {
            Some(pid) => {
                signal("INT", pid);
            }
            None => {
                if wait_exit(&mut child, Duration::ZERO).is_none() {
                    self.kill_hard(&mut child);
                    self.fail("Pg::stop: postmaster.pid is unreadable; killed the server");
                }
            }
        }
        if wait_exit(&mut child, STOP_TIMEOUT).is_none() {
            self.kill_hard(&mut child);
            self.fail(&format!(
                "Pg::stop: the server did not shut down within {STOP_TIMEOUT:?}; killed it"
            ));
        }
        let addr = self.addr();
        let deadline = Instant::now() + STOP_TIMEOUT;
        while TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "Pg::stop: the server exited but port {} still accepts connections",
                    self.port
                ));
            }
            sleep(Duration::from_millis(50));
        }
    }

    /// [`stop`](Pg::stop), sleep `down_for`, then [`start_again`](Pg::start_again).
    pub fn restart_after(&mut self, down_for: Duration) {
        self.stop();
        sleep(down_for);
        self.start_again();
    }

    /// Starts the server again on the same port and data dir and waits until it accepts
    /// connections.
    pub fn start_again(&mut self) {
        if self.server.is_some() {
            panic!("Pg::start_again: the server is already running (call stop() first)");
        }
        match self.launch() {
            Ok(()) => {}
            Err(StartError::PortTaken) => self.fail(&format!(
                "Pg::start_again: port {} was taken by another process while the server was down",
                self.port
            )),
            Err(StartError::Failed(why)) => self.fail(&format!("Pg::start_again: {why}")),
        }
    }

    /// Turns TLS on with this certificate chain and key (PEM): written into the data dir
    /// as `server.crt`/`server.key` (owned by the server user, key mode 0600), `ssl = on`
    /// appended to `postgresql.conf`, and the server restarted on the same port.
    pub fn enable_tls(&mut self, cert_pem: &str, key_pem: &str) {
        use std::os::unix::fs::PermissionsExt;
        let data = self.data_dir();
        let (crt, key) = (data.join("server.crt"), data.join("server.key"));
        fs::write(&crt, cert_pem).unwrap_or_else(|e| panic!("cannot write {}: {e}", crt.display()));
        fs::write(&key, key_pem).unwrap_or_else(|e| panic!("cannot write {}: {e}", key.display()));
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600))
            .unwrap_or_else(|e| panic!("cannot chmod {}: {e}", key.display()));
        if self.run_as.switches_user() {
            let out = command_output(
                Path::new("chown"),
                Command::new("chown")
                    .arg(format!("{OS_USER}:{OS_USER}"))
                    .arg(&crt)
                    .arg(&key),
            );
            check(&out, "chown server.crt server.key");
        }
        let conf = data.join("postgresql.conf");
        let mut text = fs::read_to_string(&conf)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", conf.display()));
        text.push_str("\nssl = on\n");
        fs::write(&conf, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", conf.display()));
        self.stop();
        self.start_again();
    }

    /// Runs `sql` with `psql -tA` (as the `postgres` superuser, over TCP with the password) in
    /// database `cresolver` and returns stdout trimmed. Command tags ("INSERT 0 1") are
    /// suppressed; several statements in one string run in one transaction. Panics with
    /// psql's stderr on failure.
    pub fn psql(&self, sql: &str) -> String {
        self.psql_in(DATABASE, sql)
    }

    fn psql_in(&self, database: &str, sql: &str) -> String {
        let psql = self.psql_bin();
        let port = self.port.to_string();
        let out = command_output(
            &psql,
            Command::new(&psql)
                .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-tA"])
                .args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &port,
                    "-U",
                    SUPERUSER,
                    "-d",
                    database,
                ])
                .args(["-c", sql])
                .env("PGPASSWORD", PASSWORD)
                .env("PGCONNECT_TIMEOUT", "10")
                .current_dir(self.dir.path()),
        );
        if !out.status.success() {
            panic!(
                "psql failed ({}) running `{sql}` on port {}:\n{}",
                out.status,
                self.port,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Spawns `postgres` on `self.port` and waits until it accepts connections. On failure a
    /// still running server stays in `self.server` (Drop stops it).
    fn launch(&mut self) -> Result<(), StartError> {
        let log_path = self.log_path();
        let log_offset = fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", log_path.display()));
        let log_err = log
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot dup {}: {e}", log_path.display()));
        let data = path_str(&self.data_dir()).to_owned();
        let socket_dir = format!("unix_socket_directories={}", path_str(self.dir.path()));
        let port = self.port.to_string();
        let postgres = self.bin.join("postgres");
        let child = self
            .as_server_user(
                &postgres,
                &[
                    "-D",
                    &data,
                    "-p",
                    &port,
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    &socket_dir,
                    "-c",
                    "fsync=off",
                    "-c",
                    "max_connections=200",
                    "-c",
                    "shared_buffers=32MB",
                ],
            )
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| StartError::Failed(format!("cannot run {}: {e}", postgres.display())))?;
        self.server = Some(child);

        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let child = self.server.as_mut().expect("server was just set");
            let exited = match child.try_wait() {
                Ok(status) => status.map(|s| s.to_string()),
                Err(e) => Some(format!("unknown status ({e})")),
            };
            if let Some(status) = exited {
                self.server = None;
                let log = read_log_from(&log_path, log_offset);
                if log.contains("Address already in use") {
                    return Err(StartError::PortTaken);
                }
                return Err(StartError::Failed(format!(
                    "postgres exited during startup with {status}"
                )));
            }
            if self.is_ready() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(StartError::Failed(format!(
                    "PostgreSQL did not accept connections on port {} within {READY_TIMEOUT:?}",
                    self.port
                )));
            }
            sleep(Duration::from_millis(100));
        }
    }

    fn is_ready(&self) -> bool {
        let pg_isready = self.bin.join("pg_isready");
        let port = self.port.to_string();
        Command::new(&pg_isready)
            .args([
                "-q",
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                SUPERUSER,
                "-d",
                "postgres",
            ])
            .args(["-t", "1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", pg_isready.display()))
            .success()
    }

    /// The postmaster's pid: first line of `postmaster.pid`, or the child itself when no user
    /// switch is in between.
    fn postmaster_pid(&self, child: &Child) -> Option<u32> {
        let from_file = fs::read_to_string(self.data_dir().join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next()?.trim().parse().ok());
        match (&self.run_as, from_file) {
            (_, Some(pid)) => Some(pid),
            (RunAs::Me, None) => Some(child.id()),
            (_, None) => None,
        }
    }

    /// SIGKILL to the postmaster and the child; never panics.
    fn kill_hard(&self, child: &mut Child) {
        if let Some(pid) = self.postmaster_pid(child) {
            signal("KILL", pid);
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// `program args...` as the OS user that owns the cluster.
    fn as_server_user(&self, program: &Path, args: &[&str]) -> Command {
        let mut cmd = self.run_as.command(program, args);
        // The server user may not be allowed into the test's working directory.
        cmd.current_dir(self.dir.path());
        cmd
    }

    fn psql_bin(&self) -> PathBuf {
        let own = self.bin.join("psql");
        if own.is_file() {
            own
        } else {
            PathBuf::from("/usr/bin/psql")
        }
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Panics with `what` and the tail of the server log.
    fn fail(&self, what: &str) -> ! {
        let log = read_log_from(&self.log_path(), 0);
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
        panic!(
            "{what}\n--- server log ({}, last {LOG_TAIL_LINES} lines) ---\n{tail}",
            self.log_path().display()
        );
    }
}

impl Drop for Pg {
    /// Immediate shutdown (SIGQUIT); SIGKILL if it is not down within 10 s. Never panics.
    fn drop(&mut self) {
        let Some(mut child) = self.server.take() else {
            return;
        };
        match self.postmaster_pid(&child) {
            Some(pid) => signal("QUIT", pid),
            // Still starting (no postmaster.pid yet): runuser/su pass SIGTERM on to it.
            None => signal("TERM", child.id()),
        }
        if wait_exit(&mut child, Duration::from_secs(10)).is_none() {
            self.kill_hard(&mut child);
        }
    }
}

enum StartError {
    /// The server could not bind its port.
    PortTaken,
    Failed(String),
}

/// How the server binaries are run: `initdb` and `postgres` refuse to run as root.
enum RunAs {
    Me,
    Runuser(PathBuf),
    Su(PathBuf),
}

impl RunAs {
    fn detect() -> RunAs {
        if !is_root() {
            return RunAs::Me;
        }
        let user_exists = Command::new("id")
            .args(["-u", OS_USER])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !user_exists {
            panic!(
                "running as root, but there is no `{OS_USER}` system user to run PostgreSQL as \
                 (Debian's postgresql package creates it: run scripts/install-tools.sh)"
            );
        }
        if let Some(runuser) = find_program("runuser") {
            RunAs::Runuser(runuser)
        } else if let Some(su) = find_program("su") {
            RunAs::Su(su)
        } else {
            panic!(
                "running as root, but neither runuser nor su is available to switch to `{OS_USER}`"
            );
        }
    }

    fn switches_user(&self) -> bool {
        !matches!(self, RunAs::Me)
    }

    fn command(&self, program: &Path, args: &[&str]) -> Command {
        match self {
            RunAs::Me => {
                let mut cmd = Command::new(program);
                cmd.args(args);
                cmd
            }
            RunAs::Runuser(runuser) => {
                let mut cmd = Command::new(runuser);
                cmd.args(["-u", OS_USER, "--"]).arg(program).args(args);
                cmd
            }
            RunAs::Su(su) => {
                let mut script = format!("exec {}", sh_quote(path_str(program)));
                for arg in args {
                    script.push(' ');
                    script.push_str(&sh_quote(arg));
                }
                let mut cmd = Command::new(su);
                cmd.args([OS_USER, "-s", "/bin/sh", "-c", &script]);
                cmd
            }
        }
    }
}

/// `PG_BIN`, or the highest `/usr/lib/postgresql/<version>/bin` that has `initdb`.
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PG_BIN") {
        let dir = PathBuf::from(dir);
        if !dir.join("initdb").is_file() {
            panic!("PG_BIN={} has no initdb", dir.display());
        }
        return dir;
    }
    let mut best: Option<(Vec<u32>, PathBuf)> = None;
    for entry in fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
    {
        let Some(version) = entry.file_name().to_str().and_then(parse_version) else {
            continue;
        };
        let bin = entry.path().join("bin");
        if bin.join("initdb").is_file() && best.as_ref().is_none_or(|(v, _)| version > *v) {
            best = Some((version, bin));
        }
    }
    match best {
        Some((_, bin)) => bin,
        None => panic!(
            "PostgreSQL not found: no /usr/lib/postgresql/*/bin/initdb. Install Debian's \
             postgresql package (scripts/install-tools.sh does) or set PG_BIN to a bin dir."
        ),
    }
}

fn parse_version(name: &str) -> Option<Vec<u32>> {
    name.split('.').map(|part| part.parse().ok()).collect()
}

fn is_root() -> bool {
    // /proc/self is owned by the effective uid.
    if let Ok(meta) = fs::metadata("/proc/self") {
        return meta.uid() == 0;
    }
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn temp_dir(run_as: &RunAs) -> tempfile::TempDir {
    let mut builder = tempfile::Builder::new();
    builder.prefix("cresolver-pg-");
    // As root, stay out of $TMPDIR: the `postgres` user must be able to reach the directory.
    let dir = if run_as.switches_user() {
        builder.tempdir_in("/tmp")
    } else {
        builder.tempdir()
    };
    dir.unwrap_or_else(|e| panic!("cannot create a temp dir for PostgreSQL: {e}"))
}

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// `kill -s SIG PID` (shell builtin); never panics.
fn signal(sig: &str, pid: u32) {
    let _ = Command::new("/bin/sh")
        .args(["-c", &format!("kill -s {sig} {pid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Waits up to `timeout` for `child` to exit; `None` when it is still running.
fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => sleep(Duration::from_millis(20)),
            _ => return None,
        }
    }
}

/// Runs `cmd` to completion. `program` names it in the panic message (not `{cmd:?}`, which
/// would show `PGPASSWORD`).
fn command_output(program: &Path, cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()))
}

fn check(out: &Output, what: &str) {
    if !out.status.success() {
        panic!(
            "{what} failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
}

fn read_log_from(path: &Path, offset: u64) -> String {
    let bytes = fs::read(path).unwrap_or_default();
    let start = usize::try_from(offset).unwrap_or(0).min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

fn path_str(path: &Path) -> &str {
    path.to_str()
        .unwrap_or_else(|| panic!("path is not UTF-8: {}", path.display()))
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
