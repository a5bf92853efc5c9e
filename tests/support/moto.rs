//! A moto server per test binary (threaded), plus a single-threaded one for race tests.
//! Started on 127.0.0.1 with an ephemeral port; a server that cannot start fails the test
//! loudly (install it with `python3 -m pip install 'moto[server]'`, which `make test` does).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

pub struct Moto {
    pub endpoint: String,
    _child: Child,
}

impl Moto {
    fn start(mode: &str) -> Moto {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/support/moto_server.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(mode)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start python3 for moto: {e}"));
        let stdout = child.stdout.take().expect("moto stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read moto port");
        let port: u16 = line.trim().parse().unwrap_or_else(|_| {
            panic!(
                "moto server did not start (printed {line:?}). Install it with: \
                 python3 -m pip install 'moto[server]'"
            )
        });
        Moto {
            endpoint: format!("http://127.0.0.1:{port}"),
            _child: child,
        }
    }
}

/// The shared, threaded moto server of this test binary.
pub fn shared() -> &'static Moto {
    static MOTO: OnceLock<Moto> = OnceLock::new();
    MOTO.get_or_init(|| Moto::start("threaded"))
}

/// A single-threaded moto server: conditional writes are atomic, as on DynamoDB.
pub fn single_threaded() -> &'static Moto {
    static MOTO: OnceLock<Moto> = OnceLock::new();
    MOTO.get_or_init(|| Moto::start("single"))
}
