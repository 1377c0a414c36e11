//! Output for people: aligned tables and `key: value` lines.

use serde_json::Value;

fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// Prints rows under a header, each column as wide as its widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", parts.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_uppercase()).collect());
    for r in rows {
        line(r.clone());
    }
}

/// A page of runs, and the cursor of the next.
pub(crate) fn runs(page: &Value) {
    let rows: Vec<Vec<String>> = page["runs"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|r| {
            vec![
                cell(&r["run_id"]),
                format!("{} v{}", cell(&r["workflow"]), cell(&r["version"])),
                cell(&r["status"]),
                cell(if r["error"].is_null() {
                    &r["waiting_on"]
                } else {
                    &r["error"]
                }),
                cell(&r["parent"]),
            ]
        })
        .collect();
    table(
        &["run", "workflow", "status", "waiting on / error", "parent"],
        &rows,
    );
    if let Some(next) = page["next"].as_str() {
        println!("more: --cursor {next}");
    }
}

/// Records, one a line (or one JSON object a line).
pub(crate) fn records(json: bool, records: &[Value]) {
    for r in records {
        if json {
            println!("{r}");
            continue;
        }
        let mut rest = r.clone();
        if let Value::Object(m) = &mut rest {
            for k in ["seq", "at", "kind"] {
                m.remove(k);
            }
        }
        println!("{:>5}  {:<16} {}", cell(&r["seq"]), cell(&r["kind"]), rest);
    }
}

/// One object as `key: value` lines.
pub(crate) fn object(v: &Value) {
    match v.as_object() {
        Some(m) => {
            let w = m.keys().map(String::len).max().unwrap_or(0);
            for (k, v) in m {
                println!("{k:<w$}  {}", cell(v));
            }
        }
        None => println!("{v}"),
    }
}
