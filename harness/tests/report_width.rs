//! `report.html` at a laptop's width: with two implementations (the
//! reference, and one with a long name that refuses everything, so that
//! every note, failure and interop detail shows), every table of the page,
//! each `<details>` opened, fits a 1,280-pixel window, and the page has no
//! horizontal scrollbar. Measured in headless Chromium: a script added to a
//! copy of the page compares each table's right edge and scroll width with
//! the window's; a screenshot is kept in `CARGO_TARGET_TMPDIR`
//! (`report-1280.png`) for a human to look at.
//!
//! A libtest-mimic driver: where `/usr/bin/chromium` is missing (`apt-get
//! install chromium`), the trial is reported as ignored, with that reason.

use harness::adapter::reference::Reference;
use harness::adapter::{Capabilities, Description, Implementation, Outcome};
use harness::many::{run_many, Boxed};
use harness::report::run::RunReport;
use harness::report::{Expectations, Report, SuiteInfo};
use harness::runner::scratch_dir;
use harness::suite::Layout;
use libtest_mimic::{Arguments, Completion, Trial};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHROMIUM: &str = "/usr/bin/chromium";
const WIDTH: u32 = 1280;

fn main() {
    let trial = Trial::ignorable_test("every_table_of_report_html_fits_1280_pixels", || {
        if !Path::new(CHROMIUM).is_file() {
            return Ok(Completion::ignored_with(
                "no /usr/bin/chromium to measure the page in (apt-get install chromium)",
            ));
        }
        every_table_of_report_html_fits_1280_pixels();
        Ok(Completion::Completed)
    });
    libtest_mimic::run(&Arguments::from_args(), vec![trial]).exit();
}

/// An implementation that refuses every request, naming no clause.
struct Refuser(Description);

impl Implementation for Refuser {
    fn describe(&self) -> &Description {
        &self.0
    }

    fn write(&mut self, _: &serde_json::Value, _: &Path) -> Outcome<()> {
        Outcome::Refused {
            message: "this implementation refuses to write anything at all, whatever it is handed"
                .into(),
            clause: None,
        }
    }

    fn read(&mut self, _: &Path) -> Outcome<serde_json::Value> {
        Outcome::Refused {
            message: "this implementation refuses to read anything at all".into(),
            clause: None,
        }
    }
}

/// The four reports of a run of the reference and the refuser, in `dir`.
fn two_implementations(dir: &Path) {
    let layout = Layout::repository();
    let spec = layout.spec_map().expect("spec map");
    let suites: Vec<SuiteInfo> = layout
        .suites()
        .expect("suites")
        .iter()
        .map(SuiteInfo::of)
        .collect();
    let refuser = Refuser(Description {
        name: "an-implementation-with-a-rather-long-name".into(),
        version: "0.0.1-alpha.7+build.2024".into(),
        capabilities: Capabilities {
            write: true,
            read: true,
        },
    });
    let mut imps: Vec<Boxed> = vec![Box::new(Reference::new()), Box::new(refuser)];
    let work = scratch_dir("report-width-run");
    let results = run_many(&layout, &mut imps, &work, None, true, &|_| {}).expect("the run");
    let _ = std::fs::remove_dir_all(&work);
    let none = Expectations::default();
    let reports: Vec<Report> = results
        .own
        .into_iter()
        .map(|(d, trials)| Report::new(d, suites.clone(), trials, &none).with_spec(&spec))
        .collect();
    let run = RunReport::new(suites, reports, results.interop, &BTreeMap::new(), &spec);
    run.write_all(dir, &spec).expect("reports");
}

/// Opens every `<details>`, then measures: the window's width, the page's,
/// and each table (or the clause matrix) wider than the window or than its
/// own box. The result, as JSON, in `<pre id="measured">`.
const MEASURE: &str = r#"<script>
(function () {
  document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  var root = document.documentElement;
  var out = { window: root.clientWidth, page: root.scrollWidth, tables: 0, wide: [] };
  document.querySelectorAll("table, .matrix").forEach(function (t) {
    out.tables++;
    var r = t.getBoundingClientRect();
    if (r.right > root.clientWidth + 0.5 || t.scrollWidth > t.clientWidth + 1) {
      var first = t.querySelector("th, td, div");
      out.wide.push({ class: t.className, right: Math.round(r.right), scroll: t.scrollWidth,
        client: t.clientWidth, first: first ? first.textContent.slice(0, 40) : "" });
    }
  });
  var pre = document.createElement("pre");
  pre.id = "measured";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"#;

/// Runs Chromium headless on `page` at 1280 × 900 with `mode`
/// (`--dump-dom`, `--screenshot=...`); its stdout. A fresh profile
/// directory, no network, no first-run chores; killed after a minute.
fn chromium(page: &Path, mode: &str) -> String {
    let profile = scratch_dir("report-width-profile");
    std::fs::create_dir_all(&profile).expect("profile dir");
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--window-size={WIDTH},900"))
        .arg(mode)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let mut stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    let until = Instant::now() + Duration::from_secs(60);
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(&profile);
            panic!("chromium did not finish within a minute");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_dir_all(&profile);
    reader.join().unwrap_or_default()
}

fn every_table_of_report_html_fits_1280_pixels() {
    let dir = scratch_dir("report-width");
    two_implementations(&dir);
    let html = std::fs::read_to_string(dir.join("report.html")).expect("report.html");
    let measured_page: PathBuf = dir.join("measured.html");
    std::fs::write(
        &measured_page,
        html.replace("</body>", &format!("{MEASURE}</body>")),
    )
    .expect("page");
    let dom = chromium(&measured_page, "--dump-dom");
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-1280.png");
    chromium(
        &dir.join("report.html"),
        &format!("--screenshot={}", shot.display()),
    );
    let _ = std::fs::remove_dir_all(&dir);
    let json = dom
        .split("<pre id=\"measured\">")
        .nth(1)
        .and_then(|rest| rest.split("</pre>").next())
        .unwrap_or_else(|| panic!("no measurement in the page: {}", &dom[..dom.len().min(500)]))
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let measured: serde_json::Value = serde_json::from_str(&json).expect("the measurement");
    println!(
        "measured at {WIDTH} px: {measured}; screenshot: {}",
        shot.display()
    );
    let window = measured["window"].as_u64().expect("window");
    assert!(
        window > 1200 && window <= u64::from(WIDTH),
        "the window is {window} px"
    );
    assert!(
        measured["tables"].as_u64().unwrap_or(0) > 100,
        "the tables of every clause's drill-down are measured: {measured}"
    );
    assert_eq!(
        measured["wide"],
        serde_json::json!([]),
        "tables wider than a {WIDTH}-pixel window"
    );
    assert!(
        measured["page"].as_u64() <= Some(window),
        "the page scrolls sideways: {measured}"
    );
}
