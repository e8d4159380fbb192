// `node --import` this file to install test/sink/deny-aws-sdk.mjs's hooks before anything loads.
import { register } from 'node:module';

register('./deny-aws-sdk.mjs', import.meta.url);
