#!/usr/bin/env python3
# pika against Keel's AMQP transactions: publishes held until tx_commit,
# discarded by tx_rollback, acks applied at commit, and confirms refused
# on a transactional channel (406). AMQP_HOST and AMQP_PORT say where the
# broker is. Prints "ok" and exits 0, or raises.
import os

import pika

params = pika.ConnectionParameters(host=os.environ['AMQP_HOST'], port=int(os.environ['AMQP_PORT']))
conn = pika.BlockingConnection(params)
obs = conn.channel()
obs.queue_declare(queue='tx-q', durable=True)


def depth():
    return obs.queue_declare(queue='tx-q', passive=True).method.message_count


ch = conn.channel()
ch.tx_select()
for i in range(3):
    ch.basic_publish(exchange='', routing_key='tx-q', body=b'm%d' % i,
                     properties=pika.BasicProperties(delivery_mode=2))
ch.queue_declare(queue='tx-q', passive=True)  # a round trip: the publishes arrived
assert depth() == 0, 'held publishes visible before commit: %d' % depth()
ch.tx_commit()
assert depth() == 3, 'after commit: %d' % depth()

ch.basic_publish(exchange='', routing_key='tx-q', body=b'gone')
ch.tx_rollback()
assert depth() == 3, 'after rollback: %d' % depth()

# Acks at commit: two got, one acked; rollback keeps it unacknowledged.
m1 = ch.basic_get(queue='tx-q')[0]
m2 = ch.basic_get(queue='tx-q')[0]
ch.basic_ack(m1.delivery_tag)
ch.tx_rollback()
ch.basic_ack(m1.delivery_tag)
ch.basic_ack(m2.delivery_tag)
ch.tx_commit()
ch.close()
assert depth() == 1, 'after the acks commit: %d' % depth()
body = obs.basic_get(queue='tx-q', auto_ack=True)[2]
assert body == b'm2', body

ch = conn.channel()
ch.tx_select()
try:
    ch.confirm_delivery()
    raise AssertionError('confirm.select on a tx channel was accepted')
except pika.exceptions.ChannelClosedByBroker as e:
    assert e.reply_code == 406, e
conn.close()
print('ok')
