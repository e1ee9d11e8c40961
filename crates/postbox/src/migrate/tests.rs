//! The migrations' unit tests: their files, the script, the policies' names.

use super::*;

#[test]
fn versions_are_increasing_and_named_after_files() {
    let ms = migrations(&SchemaName::new("s").unwrap());
    for (i, m) in ms.iter().enumerate() {
        assert_eq!(m.version, i as i32 + 1);
        assert!(m.name.starts_with(&format!("{:04}_", m.version)));
        assert!(m.sql.contains("s."), "{}", m.name);
    }
}

#[test]
fn a_script_records_each_migration_and_sets_the_policy_asked_for() {
    let s = SchemaName::new("shop").unwrap();
    let all = script(&s, None, 0);
    let last = FILES.last().unwrap().0;
    for m in migrations(&s) {
        let record = format!("VALUES ({}, '{}', '{}')", m.version, m.name, m.checksum);
        assert!(all.contains(&record), "{record}");
    }
    assert!(all.contains("CREATE TABLE IF NOT EXISTS shop.postbox_migrations"));
    assert!(all.ends_with("FOR EACH ROW EXECUTE FUNCTION shop.postbox_outbox_notify_adaptive();\n"));
    // The statement trigger of migration 0004 is dropped again.
    assert!(all.contains("DROP TRIGGER IF EXISTS outbox_notify ON shop.outbox"));

    let statement = script(&s, Some(WakeUp::Statement), 0);
    assert!(statement.contains("-- wake-up policy: statement"));
    assert!(statement.contains("DROP TRIGGER IF EXISTS outbox_notify_adaptive"));
    assert!(script(&s, Some(WakeUp::Logical), 0).contains("CREATE PUBLICATION"));

    // An upgrade script: only what comes after `since`, and the policy
    // left alone unless asked for.
    let upgrade = script(&s, None, last - 1);
    assert_eq!(
        upgrade
            .matches("INSERT INTO shop.postbox_migrations")
            .count(),
        1
    );
    assert!(!upgrade.contains("wake-up policy"));
    assert!(script(&s, Some(WakeUp::Off), last - 1).contains("wake-up policy: off"));
    assert!(script(&s, None, last).contains("postbox_migrations"));
}

#[test]
fn notify_policies_parse() {
    for (text, n) in [
        ("statement", WakeUp::Statement),
        ("adaptive", WakeUp::Adaptive),
        ("logical", WakeUp::Logical),
        ("off", WakeUp::Off),
    ] {
        assert_eq!(text.parse::<WakeUp>().unwrap(), n);
        assert_eq!(n.to_string(), text);
    }
    assert!("wal"
        .parse::<WakeUp>()
        .unwrap_err()
        .to_string()
        .contains("\"logical\""));
}
