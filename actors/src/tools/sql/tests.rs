//! Tests of the sql tool: reads and bindings, then each way a query could reach past its
//! bounds (writes, unlisted env keys, time, memory, output size, other files), each refused
//! with a typed error and nothing written.

use std::time::Instant;

use consort_net::RunId;

use super::*;

fn ledger() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    // Canonical, as consort-config hands it over (a temp folder may sit behind a symlink).
    let path = std::fs::canonicalize(dir.path()).unwrap().join("ledger.db");
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE spend (month TEXT, region TEXT, amount REAL);
         INSERT INTO spend VALUES ('2026-08', 'eu', 100.5), ('2026-08', 'us', 20), ('2026-07', 'eu', 7);",
    )
    .unwrap();
    (dir, path)
}

fn tool(path: PathBuf) -> SqlTool {
    SqlTool {
        name: "ledger".into(),
        description: String::new(),
        database: path,
        approval: Approval::None,
        bind_env: vec!["REGION".into()],
        timeout: Duration::from_millis(u64::from(consort_config::DEFAULT_SQL_TIMEOUT_MS)),
    }
}

/// Runs `query` with input `2026-08` and an env holding a secret the tool does not list.
async fn ask(tool: &SqlTool, query: &str) -> Result<String, ToolError> {
    let env = BTreeMap::from([
        ("REGION".to_owned(), "eu".to_owned()),
        ("SECRET".to_owned(), "hunter2".to_owned()),
    ]);
    let run = RunId::random();
    let ctx = ToolContext {
        agent: "cfo",
        run_id: &run,
        input: "2026-08",
        env: &env,
    };
    tool.invoke(ctx, &json!({ "query": query })).await
}

fn forbidden(result: Result<String, ToolError>, what: &str) -> String {
    match result {
        Err(ToolError::Forbidden(m)) => m,
        other => panic!("{what}: expected a refusal, got {other:?}"),
    }
}

fn row_count(path: &Path) -> i64 {
    let conn = Connection::open(path).unwrap();
    conn.query_row("SELECT count(*) FROM spend", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn answers_reads_and_binds_input_and_listed_env() {
    let (_dir, path) = ledger();
    let tool = tool(path);
    let one = "SELECT sum(amount) FROM spend WHERE month = '2026-08'";
    assert_eq!(ask(&tool, one).await.unwrap(), "120.5");
    let bound = "SELECT sum(amount) FROM spend WHERE region = :REGION";
    assert_eq!(ask(&tool, bound).await.unwrap(), "107.5");
    let input = "SELECT sum(amount) FROM spend WHERE month = :input";
    assert_eq!(ask(&tool, input).await.unwrap(), "120.5");
    assert_eq!(
        ask(&tool, "SELECT $input || @REGION").await.unwrap(),
        "2026-08eu"
    );
    let table = "SELECT month, amount FROM spend ORDER BY amount";
    assert!(
        ask(&tool, table)
            .await
            .unwrap()
            .starts_with("month | amount\n2026-07 | 7")
    );
    assert_eq!(
        ask(&tool, "SELECT 1 WHERE 0").await.unwrap(),
        "1\n(no rows)"
    );
    // The schema can be read.
    let schema = ask(&tool, "PRAGMA table_info(spend)").await.unwrap();
    assert!(schema.contains("region"), "{schema}");
    let schema = ask(&tool, "SELECT name FROM pragma_table_info('spend')")
        .await
        .unwrap();
    assert!(schema.contains("amount"), "{schema}");
}

#[tokio::test]
async fn an_env_key_the_tool_does_not_list_is_not_bound() {
    let (_dir, path) = ledger();
    let tool = tool(path);
    for query in [
        "SELECT :SECRET",
        "SELECT $SECRET",
        "SELECT @SECRET",
        "SELECT :NOPE",
    ] {
        let Err(ToolError::InvalidInput(message)) = ask(&tool, query).await else {
            panic!("{query}: bound")
        };
        assert!(message.contains("cannot be bound"), "{message}");
        assert!(
            message.contains(":input (the run's input), :REGION"),
            "{message}"
        );
        assert!(!message.contains("hunter2"), "{message}");
    }
    let Err(ToolError::InvalidInput(message)) = ask(&tool, "SELECT ?").await else {
        panic!("a positional parameter was bound")
    };
    assert!(message.contains(":input"), "{message}");
    assert!(matches!(
        ask(&tool, "SELECT ?1").await,
        Err(ToolError::InvalidInput(_))
    ));
}

#[tokio::test]
async fn refuses_writes_in_the_engine() {
    let (_dir, path) = ledger();
    let tool = tool(path.clone());
    for write in [
        "DELETE FROM spend",
        "/* select */ INSERT INTO spend VALUES ('x','y',1)",
        "WITH x AS (SELECT 1) UPDATE spend SET amount = 0",
        "CREATE TABLE t (x)",
        "DROP TABLE spend",
        "BEGIN",
    ] {
        forbidden(ask(&tool, write).await, write);
    }
    assert_eq!(row_count(&path), 3);
    let run = RunId::random();
    let env = BTreeMap::new();
    let ctx = ToolContext {
        agent: "cfo",
        run_id: &run,
        input: "",
        env: &env,
    };
    let bad = tool
        .invoke(ctx, &json!({"sql": "SELECT 1"}))
        .await
        .unwrap_err();
    assert!(matches!(bad, ToolError::InvalidInput(_)));
}

#[tokio::test]
async fn a_recursive_query_stops_at_the_time_limit() {
    let (_dir, path) = ledger();
    let mut tool = tool(path);
    tool.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let result = ask(
        &tool,
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    )
    .await;
    let took = started.elapsed();
    assert_eq!(result, Err(ToolError::TimedOut { limit_ms: 300 }));
    assert!(took < Duration::from_millis(1_300), "{took:?}");
    assert!(took >= Duration::from_millis(300), "{took:?}");
    let message = ToolError::TimedOut { limit_ms: 300 }.to_string();
    assert!(message.contains("300 ms"), "{message}");
}

#[tokio::test]
async fn rows_past_the_shown_ones_are_counted_until_the_time_limit() {
    let (_dir, path) = ledger();
    let mut tool = tool(path);
    tool.timeout = Duration::from_millis(300);
    let out = ask(
        &tool,
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c",
    )
    .await
    .unwrap();
    assert!(out.starts_with("x\n1\n2\n"), "{}", &out[..20]);
    assert!(out.contains("more rows not shown; counting stopped at the time limit"));
    assert_eq!(out.lines().count(), 1 + SQL_MAX_ROWS + 1);
}

#[tokio::test]
async fn a_value_past_the_length_limit_fails_at_once() {
    let (_dir, path) = ledger();
    let tool = tool(path);
    for query in [
        "SELECT zeroblob(1e9)",
        "SELECT length(zeroblob(1e9))",
        "SELECT randomblob(2000000)",
        "SELECT hex(zeroblob(600000))",
    ] {
        let started = Instant::now();
        let result = ask(&tool, query).await;
        assert_eq!(
            result,
            Err(ToolError::TooLarge {
                limit_bytes: SQL_MAX_VALUE_BYTES as u64
            }),
            "{query}"
        );
        assert!(started.elapsed() < Duration::from_secs(1), "{query}");
    }
}

#[tokio::test]
async fn the_answer_is_cut_at_its_byte_budget() {
    let (_dir, path) = ledger();
    let tool = tool(path);
    // One value below the length limit but above the output budget.
    let out = ask(&tool, "SELECT printf('%.500000c', 'x')").await.unwrap();
    assert!(out.starts_with("xxxx"));
    assert!(out.len() < SQL_MAX_OUTPUT_BYTES + 200, "{}", out.len());
    assert!(out.ends_with(&format!(
        "… (output cut at {SQL_MAX_OUTPUT_BYTES} bytes; select fewer rows or columns, or substr() of long values)"
    )));
    // Many wide rows: cut at the budget, the rest counted.
    let out = ask(
        &tool,
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 150) \
         SELECT x, printf('%.1000c', 'y') FROM c",
    )
    .await
    .unwrap();
    assert!(out.len() < SQL_MAX_OUTPUT_BYTES + 200, "{}", out.len());
    assert!(out.contains("output cut at"), "{}", &out[out.len() - 200..]);
    assert!(
        out.ends_with("more rows not shown)"),
        "{}",
        &out[out.len() - 200..]
    );
}

#[tokio::test]
async fn vacuum_into_is_refused_and_writes_no_file() {
    let (dir, path) = ledger();
    let tool = tool(path);
    let target = dir.path().join("copy.db");
    let query = format!("VACUUM INTO '{}'", target.display());
    let message = forbidden(ask(&tool, &query).await, &query);
    assert!(message.contains("would write"), "{message}");
    assert!(!target.exists());
    forbidden(ask(&tool, "VACUUM").await, "VACUUM");
}

#[tokio::test]
async fn attach_is_refused_whether_or_not_the_file_exists() {
    let (dir, path) = ledger();
    let tool = tool(path.clone());
    let there = format!("ATTACH '{}' AS other", path.display());
    let missing = format!(
        "ATTACH '{}' AS other",
        dir.path().join("missing.db").display()
    );
    let a = forbidden(ask(&tool, &there).await, &there);
    let b = forbidden(ask(&tool, &missing).await, &missing);
    assert_eq!(a, b, "the refusal tells nothing about the file");
    assert!(a.contains("ATTACH and DETACH are not allowed"), "{a}");
    assert!(!dir.path().join("missing.db").exists());
    forbidden(ask(&tool, "DETACH other").await, "DETACH");
}

#[tokio::test]
async fn pragmas_that_are_not_schema_reads_are_refused() {
    let (_dir, path) = ledger();
    let tool = tool(path.clone());
    for pragma in [
        "PRAGMA query_only = OFF",
        "PRAGMA user_version = 7",
        "PRAGMA journal_mode = DELETE",
        "PRAGMA writable_schema = ON",
        "PRAGMA temp_store_directory = '/tmp'",
        "PRAGMA user_version",
    ] {
        let message = forbidden(ask(&tool, pragma).await, pragma);
        assert!(message.contains("is not allowed"), "{message}");
    }
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 0);
}

#[tokio::test]
async fn functions_that_reach_outside_are_refused() {
    let (_dir, path) = ledger();
    let tool = tool(path);
    let message = forbidden(
        ask(&tool, "SELECT load_extension('/tmp/x.so')").await,
        "load_extension",
    );
    assert!(
        message.contains("load_extension() is not allowed"),
        "{message}"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn a_database_path_that_changed_since_loading_is_refused() {
    let (dir, path) = ledger();
    let canonical = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir(canonical.join("elsewhere")).unwrap();
    std::fs::rename(&path, canonical.join("elsewhere/ledger.db")).unwrap();
    std::os::unix::fs::symlink(canonical.join("elsewhere/ledger.db"), &path).unwrap();
    let tool = tool(path);
    let message = forbidden(ask(&tool, "SELECT 1").await, "swapped");
    assert!(message.contains("symlink"), "{message}");
}

#[test]
fn the_authorizer_allows_reads_only() {
    let allowed = [
        AuthAction::Select,
        AuthAction::Recursive,
        AuthAction::Read {
            table_name: "spend",
            column_name: "amount",
        },
        AuthAction::Function {
            function_name: "sum",
        },
        AuthAction::Pragma {
            pragma_name: "TABLE_INFO",
            pragma_value: Some("spend"),
        },
    ];
    for action in allowed {
        assert_eq!(read_only_authorization(&action), Ok(()), "{action:?}");
    }
    let refused = [
        AuthAction::Attach { filename: "x" },
        AuthAction::Detach { database_name: "x" },
        AuthAction::Function {
            function_name: "LOAD_EXTENSION",
        },
        AuthAction::Pragma {
            pragma_name: "query_only",
            pragma_value: Some("0"),
        },
        AuthAction::Insert {
            table_name: "spend",
        },
        AuthAction::Unknown {
            code: 99,
            arg1: None,
            arg2: None,
        },
    ];
    for action in refused {
        assert!(read_only_authorization(&action).is_err(), "{action:?}");
    }
    assert_eq!(
        read_only_authorization(&AuthAction::Insert {
            table_name: "spend"
        }),
        Err("INSERT is not allowed; the tool only reads".into())
    );
    assert_eq!(
        read_only_authorization(&AuthAction::CreateTempTrigger {
            trigger_name: "t",
            table_name: "spend",
        }),
        Err("CREATE TEMP TRIGGER is not allowed; the tool only reads".into())
    );
}

#[test]
fn an_answer_never_holds_more_than_its_budget() {
    let columns = ["v".to_owned()];
    // "v" + "\n" leaves 8 bytes: "ééé" is 6, the fourth é would straddle the end.
    let mut answer = Answer::new(&columns, 10, 10);
    answer.push_row(&[ValueRef::Text("éééééé".as_bytes())]);
    assert!(answer.is_full());
    assert!(answer.text.len() <= 10);
    answer.push_row(&[ValueRef::Integer(1)]);
    let out = answer.finish();
    assert!(
        out.starts_with("v\néééé\n… (output cut at 10 bytes"),
        "{out}"
    );
    assert!(out.ends_with("(1 more rows not shown)"), "{out}");

    // Invalid UTF-8 shows as U+FFFD and still counts against the budget.
    let mut answer = Answer::new(&columns, 10, 8);
    answer.push_row(&[ValueRef::Text(b"a\xffb\xffc")]);
    assert!(answer.text.len() <= 8, "{:?}", answer.text);
    assert_eq!(answer.text, "v\na\u{FFFD}b");

    // A single value answers bare.
    let mut answer = Answer::new(&columns, 10, 100);
    answer.push_row(&[ValueRef::Real(1.5)]);
    assert_eq!(answer.finish(), "1.5");

    let two = ["a".to_owned(), "b".to_owned()];
    let mut answer = Answer::new(&two, 1, 100);
    answer.push_row(&[ValueRef::Null, ValueRef::Blob(&[0; 5])]);
    answer.push_row(&[ValueRef::Null, ValueRef::Null]);
    answer.count_hidden_row();
    assert_eq!(
        answer.finish(),
        "a | b\nNULL | <5 bytes>\n… (2 more rows not shown)"
    );
}
