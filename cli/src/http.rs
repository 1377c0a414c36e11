//! The admin endpoint client: JSON over HTTP, errors as the endpoint's message.

use std::io::BufRead;

use serde_json::Value;

/// A host's admin endpoint.
pub(crate) struct Admin {
    base: String,
}

/// A path segment, percent-encoded.
pub(crate) fn seg(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn error(e: ureq::Error) -> String {
    match e {
        ureq::Error::Status(code, resp) => {
            let body: Value = resp.into_json().unwrap_or(Value::Null);
            match body["error"].as_str() {
                Some(m) => format!("{m} (HTTP {code})"),
                None => format!("HTTP {code}"),
            }
        }
        ureq::Error::Transport(t) => format!("cannot reach the admin endpoint: {t}"),
    }
}

impl Admin {
    pub(crate) fn new(url: &str) -> Admin {
        Admin {
            base: format!("{}/", url.trim_end_matches('/')),
        }
    }

    pub(crate) fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, String> {
        let mut req = ureq::get(&format!("{}{path}", self.base));
        for (k, v) in query {
            req = req.query(k, v);
        }
        req.call()
            .map_err(error)?
            .into_json()
            .map_err(|e| format!("the admin endpoint answered no JSON: {e}"))
    }

    pub(crate) fn post(&self, run: &str, action: &str, body: &Value) -> Result<Value, String> {
        ureq::post(&format!("{}api/runs/{}/{action}", self.base, seg(run)))
            .send_json(body)
            .map_err(error)?
            .into_json()
            .map_err(|e| format!("the admin endpoint answered no JSON: {e}"))
    }

    /// Reads the run's watch stream, calling `each` for every record, until the
    /// run ends. A stream that closes is asked again from the last record seen.
    pub(crate) fn watch(&self, run: &str, mut each: impl FnMut(&Value)) -> Result<(), String> {
        let url = format!("{}api/runs/{}/watch", self.base, seg(run));
        let mut last: Option<u64> = None;
        loop {
            let mut req = ureq::get(&url);
            if let Some(seq) = last {
                req = req.set("Last-Event-ID", &seq.to_string());
            }
            let resp = req.call().map_err(error)?;
            let mut retry_ms = 500;
            // The type of the event being read (`event:`), until the blank line
            // that ends it.
            let mut kind = String::new();
            for line in std::io::BufReader::new(resp.into_reader()).lines() {
                let line = line.map_err(|e| format!("the watch stream broke: {e}"))?;
                if line.is_empty() {
                    kind.clear();
                } else if let Some(k) = line.strip_prefix("event:") {
                    kind = k.trim().to_owned();
                } else if let Some(ms) = line.strip_prefix("retry:") {
                    retry_ms = ms.trim().parse().unwrap_or(retry_ms);
                } else if let Some(data) = line.strip_prefix("data:")
                    && kind == "error"
                {
                    return Err(format!("the watch ended with an error: {}", data.trim()));
                } else if let Some(data) = line.strip_prefix("data:") {
                    let record: Value = serde_json::from_str(data.trim())
                        .map_err(|e| format!("the watch stream sent no JSON: {e}"))?;
                    last = record["seq"].as_u64().or(last);
                    each(&record);
                    if matches!(
                        record["kind"].as_str(),
                        Some("RunCompleted" | "RunFailed" | "RunCancelled")
                    ) {
                        return Ok(());
                    }
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(retry_ms));
        }
    }
}
