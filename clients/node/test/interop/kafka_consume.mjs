// Cross-language peer (run by crates/postbox-cli/tests/it/node_package.rs):
// a kafkajs consumer on the inbox loop whose effect is a row
// (event_id, key, seq) in <schema>.effects; prints "ready" once it has its
// partitions, and closes gracefully on SIGTERM.
// Usage: node kafka_consume.mjs <schema> <topic> <brokers> <group>
import pg from "pg";
import { Kafka, logLevel } from "kafkajs";
import { kafkaInboxConsumer } from "@postbox-rs/postbox/kafkajs";

const [schema, topic, brokers, group] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 4 });
const kafka = new Kafka({ clientId: "postbox-test", brokers: brokers.split(","), logLevel: logLevel.NOTHING });
const consumer = kafka.consumer({ groupId: group, sessionTimeout: 10_000, heartbeatInterval: 1000 });
consumer.on(consumer.events.GROUP_JOIN, () => console.log("ready"));
await consumer.connect();
await consumer.subscribe({ topic, fromBeginning: true });
const running = await kafkaInboxConsumer(
  consumer,
  async (tx, message) => {
    const { key, seq } = message.json();
    await tx.query(`INSERT INTO ${schema}.effects (event_id, key, seq) VALUES ($1, $2, $3)`, [message.id, key, seq]);
  },
  { pool, schema, consumer: group },
);
process.on("SIGTERM", async () => {
  await running.close();
  await pool.end();
  console.log("closed");
  process.exit(0);
});
