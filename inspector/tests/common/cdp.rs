//! A small client of the Chrome DevTools protocol: launches headless Chromium (the
//! Debian package `chromium`) and speaks the five commands the browser test needs
//! over a websocket. Dialogs (`confirm`) are accepted and remembered.
#![allow(unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine;
use serde_json::{Value, json};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

pub const INSTALL: &str = "apt-get install -y chromium";

pub struct Browser {
    child: Child,
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    /// The messages of the dialogs the page opened (each accepted).
    pub dialogs: Vec<String>,
    _profile: tempfile::TempDir,
}

fn find_chromium() -> Option<String> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| std::env::split_paths(&path).any(|d| d.join(b).is_file()))
        .map(str::to_owned)
}

impl Browser {
    /// Starts headless Chromium; fails with the install command when it is missing.
    pub fn launch() -> anyhow::Result<Browser> {
        let Some(bin) = find_chromium() else {
            bail!("Chromium is missing: install it with `{INSTALL}` (Debian package `chromium`)");
        };
        let profile = tempfile::tempdir()?;
        let mut child = Command::new(&bin)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--hide-scrollbars",
                "--remote-debugging-port=0",
                "--window-size=1280,900",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {bin}; install it with `{INSTALL}`"))?;
        let stderr = child.stderr.take().context("stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let browser_ws = loop {
            let Some(line) = lines.next() else {
                bail!("{bin} exited before it listened for DevTools");
            };
            let line = line?;
            if let Some(url) = line.strip_prefix("DevTools listening on ") {
                break url.trim().to_owned();
            }
        };
        // Keep draining its stderr so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let port = browser_ws
            .trim_start_matches("ws://")
            .split('/')
            .next()
            .context("DevTools address")?
            .to_owned();
        let mut page_ws = None;
        for _ in 0..50 {
            let targets: Value = ureq::get(&format!("http://{port}/json/list"))
                .call()?
                .into_json()?;
            page_ws = targets
                .as_array()
                .and_then(|t| t.iter().find(|t| t["type"] == "page"))
                .and_then(|t| t["webSocketDebuggerUrl"].as_str().map(str::to_owned));
            if page_ws.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let page_ws = page_ws.context("no page target")?;
        let (ws, _) = tungstenite::connect(page_ws.as_str())?;
        if let MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_secs(60)))?;
        }
        let mut b = Browser {
            child,
            ws,
            next_id: 0,
            dialogs: Vec::new(),
            _profile: profile,
        };
        b.call("Page.enable", json!({}))?;
        Ok(b)
    }

    fn send(&mut self, method: &str, params: Value) -> anyhow::Result<u64> {
        self.next_id += 1;
        let msg = json!({ "id": self.next_id, "method": method, "params": params });
        self.ws.send(Message::Text(msg.to_string().into()))?;
        Ok(self.next_id)
    }

    /// One command and its result; accepts the dialogs the page opens meanwhile.
    pub fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.send(method, params)?;
        loop {
            let msg = self.ws.read()?;
            let Ok(text) = msg.to_text() else { continue };
            let Ok(v) = serde_json::from_str::<Value>(text) else {
                continue;
            };
            if v["method"] == "Page.javascriptDialogOpening" {
                self.dialogs
                    .push(v["params"]["message"].as_str().unwrap_or("").to_owned());
                self.send("Page.handleJavaScriptDialog", json!({ "accept": true }))?;
            } else if v["id"] == id {
                if let Some(e) = v.get("error") {
                    bail!("{method}: {e}");
                }
                return Ok(v["result"].clone());
            }
        }
    }

    /// Evaluates `expr` in the page (awaiting a promise) and returns its value.
    pub fn eval(&mut self, expr: &str) -> anyhow::Result<Value> {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": expr, "awaitPromise": true, "returnByValue": true }),
        )?;
        if let Some(e) = r.get("exceptionDetails") {
            bail!(
                "`{expr}` threw: {}",
                e["exception"]["description"]
                    .as_str()
                    .unwrap_or(&e.to_string())
            );
        }
        Ok(r["result"]["value"].clone())
    }

    /// Waits (in the page, for at most 15 s) until `cond` is truthy; returns its value.
    pub fn wait_for(&mut self, what: &str, cond: &str) -> anyhow::Result<Value> {
        let js = format!(
            "new Promise((ok, no) => {{ const t0 = Date.now(); const f = () => {{ let v; \
             try {{ v = ({cond}); }} catch (e) {{}} if (v) ok(v); \
             else if (Date.now() - t0 > 15000) no(new Error({what:?} + ': timed out')); \
             else setTimeout(f, 50); }}; f(); }})"
        );
        match self.eval(&js) {
            Ok(v) => Ok(v),
            Err(e) => {
                let page = self
                    .eval("document.body.innerText.slice(0, 2000)")
                    .unwrap_or_default();
                Err(e.context(format!(
                    "waiting for {what}; the page shows:\n{}",
                    page.as_str().unwrap_or("")
                )))
            }
        }
    }

    pub fn navigate(&mut self, url: &str) -> anyhow::Result<()> {
        self.call("Page.navigate", json!({ "url": url }))?;
        self.wait_for("the page to load", "document.readyState === 'complete'")?;
        Ok(())
    }

    pub fn screenshot(&mut self, path: &Path) -> anyhow::Result<()> {
        let r = self.call("Page.captureScreenshot", json!({ "format": "png" }))?;
        let data = r["data"].as_str().context("screenshot data")?;
        std::fs::write(
            path,
            base64::engine::general_purpose::STANDARD.decode(data)?,
        )?;
        Ok(())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
